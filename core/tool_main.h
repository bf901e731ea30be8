// run_tool: the main wrapper of a plain program (no MPI: strata-plan, strata-ckpt, the benchmarks), as run_main is of
// a job's: every exception, of any type, ends the program with one line on stderr and exit code 1.
#pragma once

#include <functional>
#include <string>

namespace strata {

// Runs `body` and returns its exit code; on an exception prints "<name>: <message>" (a strata::Error without its
// "[rank ?] " prefix, which names no rank outside a job; std::bad_alloc as out of memory; anything else as such) and
// returns 1.
int run_tool(const std::string& name, const std::function<int()>& body);
// An error's message without the "[rank ?] " a process that is not a rank of a job gets (file:line stays).
std::string tool_message(const std::exception& e);

}  // namespace strata
