// strata-plan --inference: the inference planner's command line (its own flags; strata_plan.cc hands over to it),
// the memory-size rule strata-plan's modes read their size flags with, and the check that the plan was written.
#pragma once

#include <string>

// A memory size flag as GPU data sheets count: "80GB" is 80e9 bytes, "80GiB" 80 x 2^30 (core/env.h's parse_bytes,
// whose "GB" is 2^30, rescaled unless the text says "iB").
double data_sheet_bytes(const std::string& text, const char* flag);

// The plan is the output: `rc` when standard output took it all, else 1 with the system error on standard error (a
// full disk, a closed pipe). Every mode of strata-plan returns through it.
int plan_written(int rc);

// Parses argv (which holds --inference) and prints the plan; returns 0 when it fits, 2 when not, 1 on an error.
int strata_plan_inference(int argc, char** argv);
