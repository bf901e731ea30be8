// A StepDeclaration as a JSON document: what a trainer writes (custom_trainer --declaration-out) and strata-plan
// --declaration reads, so the planner predicts an embedder's model by the same predict_step_memory the trainer's
// --check-memory holds to the ledger. One rank's declaration: its units (local shapes: a tp rank's slices, a pipeline
// stage's units), its sharding options and data-parallel groups, its optimizer, the pool slots it holds, and its own
// buffers by name, ledger category and place. The format, with an example: docs/embedding.md.
#pragma once

#include <string>

#include "runtime/memory/step_memory.h"

namespace strata {

// The document (format "strata-step-declaration", version 1), pretty-printed.
std::string step_declaration_json(const StepDeclaration& d);
// Parses and checks a document (every value's type and range, unknown keys refused, sizes that overflow); errors are
// kInvalidArgument naming `origin` and the JSON path of the value.
StepDeclaration parse_step_declaration(const std::string& text, const std::string& origin);
// The same from a file (read through the checked input path: kIo naming it when it cannot be read).
StepDeclaration read_step_declaration(const std::string& path);

}  // namespace strata
