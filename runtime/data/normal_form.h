// NormalForm: the Unicode normalizers a tokenizer.json may name (NFC, NFD, NFKC, NFKD), applied through utf8proc.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace strata {

enum class NormalForm { kNFC, kNFD, kNFKC, kNFKD };

// The form a tokenizer.json normalizer "type" names; nullopt for any other type.
std::optional<NormalForm> normal_form_named(std::string_view type);

// Appends `text` (valid UTF-8) in `form` to `out`.
void append_normalized(NormalForm form, std::string_view text, std::string* out);

}  // namespace strata
