// strata-plan --inference: the inference planner's command line (its own flags; strata_plan.cc hands over to it).
#pragma once

// Parses argv (which holds --inference) and prints the plan; returns 0 when it fits, 2 when not, 1 on an error.
int strata_plan_inference(int argc, char** argv);
