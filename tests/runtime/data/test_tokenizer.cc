// Tokenizers against their references: Hugging Face tokenizers (three byte-level BPE tokenizer.json files) and the
// sentencepiece module (one .model), on the corpus of tests/data/tokenizers/expected.json; and the refusals.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "runtime/data/tokenizer.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kDir = std::string(STRATA_SOURCE_DIR) + "/tests/data/tokenizers";
const std::vector<std::string> kStyles = {"gpt2", "llama3", "qwen2", "llama2"};

std::string file_of(const std::string& style) {
  return kDir + "/" + style + (style == "llama2" ? "_tokenizer.model" : "_tokenizer.json");
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_file(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
}

const json& expected() {
  static const json doc = json::parse(read_file(kDir + "/expected.json"));
  return doc;
}

std::string from_hex(const std::string& hex) {
  std::string out;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2)
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

// A fresh directory under the system's temporary one, removed at the end of the test.
class ScratchDir {
 public:
  ScratchDir() {
    static int count = 0;
    path_ =
        fs::temp_directory_path() / ("strata_tokenizer_" + std::to_string(getpid()) + "_" + std::to_string(count++));
    fs::create_directories(path_);
  }
  ~ScratchDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

class TokenizerReference : public testing::TestWithParam<std::string> {};

TEST_P(TokenizerReference, IdsEqualTheReferenceOnEveryCase) {
  const std::string style = GetParam();
  const auto tok = load_tokenizer(file_of(style));
  EXPECT_EQ(tok->vocab_size(), expected()["vocab_size"][style].get<int>());
  for (const json& c : expected()["cases"]) {
    const std::string text = from_hex(c["hex"]);
    const std::string name = c["name"];
    const auto want = c["ids"][style].get<std::vector<std::int32_t>>();
    const auto got = tok->encode(text);
    EXPECT_EQ(got, want) << style << " case " << name;
    // Lossless: byte-level BPE on every case, invalid bytes included, but where NFC composes marks (Qwen2);
    // SentencePiece on valid UTF-8 (it reads invalid bytes as U+FFFD).
    const bool lossless = style == "qwen2"    ? name != "combining_marks" && name != "invalid_marks"
                          : style == "llama2" ? c.contains("text")
                                              : true;
    EXPECT_EQ(c["lossless"][style].get<bool>(), lossless) << style << " case " << name;
    if (lossless) {
      EXPECT_EQ(tok->decode(got), text) << style << " case " << name;
    }
    if (style == "llama2") {  // the module's decode of its ids, U+FFFD and all
      EXPECT_EQ(tok->decode(want), from_hex(c["decoded_llama2_hex"])) << "case " << name;
    }
  }
}

TEST_P(TokenizerReference, SpecialTokensMapToTheirIds) {
  const std::string style = GetParam();
  const auto tok = load_tokenizer(file_of(style));
  for (const auto& [token, id] : expected()["special_ids"][style].items()) {
    EXPECT_EQ(tok->token_id(token), std::optional<std::int32_t>(id.get<std::int32_t>())) << token;
    const bool control = token == "<s>" || token == "</s>";  // SentencePiece never reads these from text
    if (!control) {
      // SentencePiece puts its dummy prefix ("▁") in front of the text, and so before a token at its start.
      const auto ids = tok->encode("x" + token + "x");
      EXPECT_EQ(std::count(ids.begin(), ids.end(), id.get<std::int32_t>()), 1) << token;
      if (style != "llama2") {
        EXPECT_EQ(tok->encode(token), std::vector<std::int32_t>{id.get<std::int32_t>()});
      }
    }
    EXPECT_EQ(tok->decode(std::vector<std::int32_t>{id.get<std::int32_t>()}), control ? "" : token);
  }
  EXPECT_EQ(tok->token_id("no such token, surely"), std::nullopt);
}

TEST_P(TokenizerReference, ThreadsEncodeTheSameIds) {
  const std::string style = GetParam();
  const auto tok = load_tokenizer(file_of(style));
  std::vector<std::thread> threads;
  std::vector<int> wrong(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 3; ++round)
        for (const json& c : expected()["cases"])
          if (tok->encode(from_hex(c["hex"])) != c["ids"][style].get<std::vector<std::int32_t>>()) ++wrong[t];
    });
  }
  for (auto& t : threads) t.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(wrong[t], 0) << "thread " << t;
}

TEST_P(TokenizerReference, DecodeRefusesAnIdOutsideTheVocab) {
  const auto tok = load_tokenizer(file_of(GetParam()));
  for (const std::int32_t id : {-1, tok->vocab_size()}) {
    try {
      tok->decode(std::vector<std::int32_t>{id});
      ADD_FAILURE() << "decode accepted id " << id;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("token id " + std::to_string(id)), std::string::npos) << e.what();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, TokenizerReference, testing::ValuesIn(kStyles),
                         [](const testing::TestParamInfo<std::string>& info) { return info.param; });

TEST(LoadTokenizer, FindsTheTokenizerOfAModelDirectory) {
  ScratchDir dir;
  write_file(dir.path() / "config.json", "{}");
  fs::copy_file(file_of("qwen2"), dir.path() / "tokenizer.json");
  fs::copy_file(file_of("llama2"), dir.path() / "tokenizer.model");  // tokenizer.json is chosen first
  write_file(dir.path() / "tokenizer_config.json",
             R"({"bos_token": null, "eos_token": {"content": "<|im_end|>", "special": true}})");
  for (const fs::path& p : {dir.path(), dir.path() / "config.json"}) {
    const auto tok = load_tokenizer(p.string());
    EXPECT_EQ(tok->path(), (dir.path() / "tokenizer.json").string());
    EXPECT_EQ(tok->eos_id(), std::optional<std::int32_t>(602));
    EXPECT_EQ(tok->bos_id(), std::nullopt);
  }
  fs::remove(dir.path() / "tokenizer.json");
  const auto sp = load_tokenizer(dir.path().string());
  EXPECT_EQ(sp->path(), (dir.path() / "tokenizer.model").string());
  EXPECT_EQ(sp->bos_id(), std::optional<std::int32_t>(1));
  EXPECT_EQ(sp->eos_id(), std::optional<std::int32_t>(2));
  EXPECT_EQ(load_tokenizer(file_of("gpt2"))->eos_id(), std::nullopt);  // no tokenizer_config.json beside it
}

// load_tokenizer(path) throws `code` with a message naming the path and every one of `words`.
void expect_refusal(const std::string& path, ErrorCode code, const std::vector<std::string>& words) {
  try {
    load_tokenizer(path);
    ADD_FAILURE() << path << " was accepted";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.code(), code) << what;
    EXPECT_NE(what.find(path), std::string::npos) << what;
    for (const auto& w : words) EXPECT_NE(what.find(w), std::string::npos) << "no \"" << w << "\" in: " << what;
  }
}

// The Llama-3-style file with `edit` applied, written to `dir`/name.
std::string edited(const ScratchDir& dir, const std::string& name, const std::function<void(json&)>& edit) {
  json doc = json::parse(read_file(file_of("llama3")));
  edit(doc);
  const auto path = (dir.path() / name).string();
  write_file(path, doc.dump());
  return path;
}

TEST(LoadTokenizer, RefusesWhatItDoesNotSupportByName) {
  ScratchDir dir;
  expect_refusal(edited(dir, "a.json", [](json& d) { d["model"]["type"] = "WordPiece"; }), ErrorCode::kUnsupported,
                 {"model type", "\"WordPiece\""});
  expect_refusal(edited(dir, "b.json",
                        [](json& d) {
                          d["normalizer"] = {{"type", "BertNormalizer"}};
                        }),
                 ErrorCode::kUnsupported, {"normalizer", "\"BertNormalizer\""});
  expect_refusal(edited(dir, "c.json",
                        [](json& d) {
                          d["pre_tokenizer"] = {{"type", "Metaspace"}};
                        }),
                 ErrorCode::kUnsupported, {"pre-tokenizer", "\"Metaspace\""});
  expect_refusal(edited(dir, "d.json", [](json& d) { d["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed"; }),
                 ErrorCode::kUnsupported, {"Split", "\"Removed\""});
  expect_refusal(
      edited(dir, "e.json", [](json& d) { d["pre_tokenizer"]["pretokenizers"][1]["add_prefix_space"] = true; }),
      ErrorCode::kUnsupported, {"ByteLevel", "add_prefix_space"});
  expect_refusal(edited(dir, "f.json",
                        [](json& d) {
                          d["decoder"] = {{"type", "WordPiece"}};
                        }),
                 ErrorCode::kUnsupported, {"decoder", "\"WordPiece\""});
  expect_refusal(edited(dir, "g.json", [](json& d) { d["model"]["byte_fallback"] = true; }), ErrorCode::kUnsupported,
                 {"byte_fallback"});
  expect_refusal(edited(dir, "h.json", [](json& d) { d["added_tokens"][0]["lstrip"] = true; }), ErrorCode::kUnsupported,
                 {"<|begin_of_text|>", "lstrip"});
  expect_refusal(
      edited(dir, "i.json", [](json& d) { d["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed"; }),
      ErrorCode::kUnsupported, {"(unclosed", "PCRE2"});
  expect_refusal(edited(dir, "j.json",
                        [](json& d) {
                          d["model"]["merges"][0] = {"Ġ", "no-such-token"};
                        }),
                 ErrorCode::kInvalidArgument, {"merge", "no-such-token"});
  expect_refusal(edited(dir, "k.json", [](json& d) { d["model"]["vocab"].erase("Ā"); }), ErrorCode::kUnsupported,
                 {"byte 0x00"});
}

TEST(LoadTokenizer, RefusesMissingAndDamagedFiles) {
  ScratchDir dir;
  expect_refusal((dir.path() / "nothing.json").string(), ErrorCode::kIo, {"no such"});
  expect_refusal(dir.path().string(), ErrorCode::kIo, {"no tokenizer.json or tokenizer.model"});
  const std::string text = read_file(file_of("gpt2"));
  write_file(dir.path() / "cut.json", text.substr(0, text.size() / 2));
  expect_refusal((dir.path() / "cut.json").string(), ErrorCode::kInvalidArgument, {"not valid JSON"});
  write_file(dir.path() / "other.json", R"({"hello": "world"})");
  expect_refusal((dir.path() / "other.json").string(), ErrorCode::kInvalidArgument, {"not a tokenizer.json"});
  ScratchDir edits;
  expect_refusal(edited(edits, "typed.json", [](json& d) { d["pre_tokenizer"]["pretokenizers"][0]["behavior"] = 5; }),
                 ErrorCode::kInvalidArgument, {"not a tokenizer.json"});
  write_file(dir.path() / "bad.model", "this is not a protobuf");
  expect_refusal((dir.path() / "bad.model").string(), ErrorCode::kInvalidArgument, {"not a SentencePiece model"});
  write_file(dir.path() / "vocab.txt", "a\nb\n");
  expect_refusal((dir.path() / "vocab.txt").string(), ErrorCode::kUnsupported, {"not a tokenizer file"});
}

}  // namespace
}  // namespace strata
