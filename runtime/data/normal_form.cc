// Unicode normalization through utf8proc_map (explicit lengths: text may hold NUL bytes).
#include "runtime/data/normal_form.h"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>

#include "core/error.h"
#include "runtime/data/utf8_runs.h"

namespace strata {

std::optional<NormalForm> normal_form_named(std::string_view type) {
  if (type == "NFC") return NormalForm::kNFC;
  if (type == "NFD") return NormalForm::kNFD;
  if (type == "NFKC") return NormalForm::kNFKC;
  if (type == "NFKD") return NormalForm::kNFKD;
  return std::nullopt;
}

void append_normalized(NormalForm form, std::string_view text, std::string* out) {
  if (text.empty() || is_ascii(text)) {  // ASCII is the same in every normal form
    out->append(text);
    return;
  }
  int options = UTF8PROC_STABLE;
  switch (form) {
    case NormalForm::kNFC: options |= UTF8PROC_COMPOSE; break;
    case NormalForm::kNFD: options |= UTF8PROC_DECOMPOSE; break;
    case NormalForm::kNFKC: options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case NormalForm::kNFKD: options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
  }
  utf8proc_uint8_t* mapped = nullptr;
  const auto n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()), static_cast<utf8proc_ssize_t>(text.size()),
                   &mapped, static_cast<utf8proc_option_t>(options));
  const std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(mapped, &std::free);
  STRATA_CHECK_CODE(ErrorCode::kInternal, n >= 0, "utf8proc_map failed on {} bytes: {}", text.size(),
                    utf8proc_errmsg(n));
  out->append(reinterpret_cast<const char*>(mapped), static_cast<std::size_t>(n));
}

}  // namespace strata
