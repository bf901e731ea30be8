// strata-plan --declaration FILE: the memory of a model the planner has no shape for (an embedder's own), from the
// step declaration its trainer wrote (runtime/memory/step_declaration_file.h, custom_trainer --declaration-out): every
// ledger category on the device and the host by predict_step_memory, each term by name, and whether it fits.
#pragma once

// Parses argv (which holds --declaration) and prints the prediction; returns 0 when it fits --device-memory (or none
// was given), 2 when not, 1 on an error.
int strata_plan_declaration(int argc, char** argv);
