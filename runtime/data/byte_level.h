// GPT-2's byte-level alphabet: the one printable character that stands for each byte in a byte-level BPE vocab.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace strata {

// The UTF-8 of the character standing for each byte ("!" for 0x21, "Ġ" for a space, "Ā" for 0x00).
const std::array<std::string, 256>& byte_level_chars();

// The bytes a byte-level token stands for ("Ġthe" -> " the"); nullopt when a character of it is not in the alphabet
// (an added token such as "<|endoftext|>" is, character by character; one with a space is not).
std::optional<std::string> byte_level_decode(std::string_view token);

}  // namespace strata
