// run_tool: one line and exit code 1 for every exception of a plain program.
#include "core/tool_main.h"

#include <cstdio>
#include <exception>
#include <new>

namespace strata {

std::string tool_message(const std::exception& e) {
  std::string m = e.what();
  const std::string unranked = "[rank ?] ";
  if (m.rfind(unranked, 0) == 0) m.erase(0, unranked.size());
  return m;
}

int run_tool(const std::string& name, const std::function<int()>& body) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "%s: out of memory (std::bad_alloc: an allocation the system refused)\n", name.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", name.c_str(), tool_message(e).c_str());
  } catch (...) {
    std::fprintf(stderr, "%s: failed with an exception that is not a std::exception\n", name.c_str());
  }
  return 1;
}

}  // namespace strata
