// GPT data and weight file tests: safetensors round trips, interop and malformed files; token files, the batch
// window rule and the synthetic generator (checked against an independent implementation and Python's values).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "models/gpt/data/token_data.h"
#include "core/dtype.h"
#include "core/error.h"

namespace strata::gpt {
namespace {

namespace fs = std::filesystem;

// Every token of a TokenFile, through its read path and its mapped path (which must agree).
std::vector<std::uint32_t> all_tokens(const TokenFile& f) {
  std::vector<std::uint32_t> read(f.size()), mapped(f.size());
  f.read(0, f.size(), read.data());
  f.copy(0, f.size(), mapped.data());
  EXPECT_EQ(read, mapped);
  return read;
}

// A fresh directory per test under the system temp dir, removed afterwards.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    dir_ =
        fs::temp_directory_path() / ("strata_gpt_io_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

 private:
  fs::path dir_;
};

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(f.good()) << path;
}

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

std::string le64(std::uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(v >> (8 * i));
  return s;
}

// A safetensors file: the header length, the header text as given, the data bytes.
std::string safetensors_bytes(const std::string& header, const std::string& data) {
  return le64(header.size()) + header + data;
}

template <typename T>
std::string raw(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// Runs fn and expects a strata::Error with `code` whose message contains every one of `parts`.
void expect_error(const std::function<void()>& fn, ErrorCode code, const std::vector<std::string>& parts,
                  const std::string& context = "") {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(error_code_name(e.code()), std::string(error_code_name(code))) << context << ": " << e.what();
    for (const auto& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << context << ": '" << p << "' not in: " << e.what();
    return;
  } catch (const std::exception& e) {
    ADD_FAILURE() << context << ": not a strata::Error: " << e.what();
    return;
  }
  ADD_FAILURE() << context << ": no error (expected one mentioning '" << (parts.empty() ? "" : parts[0]) << "')";
}

// ---- safetensors ---------------------------------------------------------------------------------------------------

// What a value written to tensor `name` of the range test reads back as (only "bf16" rounds).
float stored_as(const std::string& name, float v) { return name == "bf16" ? bf16_to_f32(f32_to_bf16(v)) : v; }

// Values exact in f32, bf16 and f16 alike.
const std::vector<float> kExact = {0.0f,    -0.0f,       1.5f, -2.25f, 0.25f, 3.0f,
                                   1024.0f, -0.0078125f, 7.5f, 96.0f,  -1.0f, 0.5f};

TEST(Safetensors, RoundTripF32BF16F16) {
  TempDir dir;
  const std::string path = dir.path("model.safetensors");
  const std::vector<float> rounding = {0.1f, -3.14159f, 1e-3f, 12345.678f};  // inexact: rounded as dtype.h does
  SafetensorsWriter w;
  w.add_f32("a.f32", DType::kF32, {3, 4}, kExact.data());
  w.add_f32("b.bf16", DType::kBF16, {12}, kExact.data());
  w.add_f32("c.f16", DType::kF16, {2, 2, 3}, kExact.data());
  w.add_f32("d.bf16", DType::kBF16, {4}, rounding.data());
  w.add_f32("e.f16", DType::kF16, {4}, rounding.data());
  w.add_f32("f.empty", DType::kF32, {0, 5}, nullptr);
  w.add_f32("g.scalar", DType::kF16, {}, &kExact[2]);
  EXPECT_EQ(w.size(), 7u);
  w.write(path, nlohmann::json{{"format", "pt"}, {"step", "12"}});
  EXPECT_FALSE(fs::exists(path + ".tmp"));

  SafetensorsReader r(path);
  EXPECT_EQ(r.names(),
            (std::vector<std::string>{"a.f32", "b.bf16", "c.f16", "d.bf16", "e.f16", "f.empty", "g.scalar"}));
  EXPECT_EQ(r.metadata(), (nlohmann::json{{"format", "pt"}, {"step", "12"}}));
  EXPECT_EQ(r.info("a.f32").dtype, DType::kF32);
  EXPECT_EQ(r.info("b.bf16").dtype, DType::kBF16);
  EXPECT_EQ(r.info("c.f16").dtype, DType::kF16);
  EXPECT_EQ(r.info("c.f16").shape, (std::vector<std::int64_t>{2, 2, 3}));
  EXPECT_EQ(r.info("f.empty").numel(), 0u);
  EXPECT_EQ(r.info("g.scalar").numel(), 1u);
  for (const char* name : {"a.f32", "b.bf16", "c.f16"}) {
    std::vector<float> got = r.read_f32(name);
    ASSERT_EQ(got.size(), kExact.size()) << name;
    for (std::size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i], kExact[i]) << name << "[" << i << "]";
      EXPECT_EQ(std::signbit(got[i]), std::signbit(kExact[i])) << name << "[" << i << "]";
    }
  }
  std::vector<float> d = r.read_f32("d.bf16"), e = r.read_f32("e.f16");
  for (std::size_t i = 0; i < rounding.size(); ++i) {
    EXPECT_EQ(d[i], bf16_to_f32(f32_to_bf16(rounding[i])));
    EXPECT_EQ(e[i], f16_to_f32(f32_to_f16(rounding[i])));
  }
  EXPECT_TRUE(r.read_f32("f.empty").empty());
  EXPECT_EQ(r.read_f32("g.scalar"), std::vector<float>{1.5f});

  // The bytes themselves: header length a multiple of 8 and space-padded, data little-endian in the order added.
  const std::string bytes = read_bytes(path);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  EXPECT_EQ(n % 8, 0u);
  const std::string header = bytes.substr(8, n);
  EXPECT_EQ(header.find_last_not_of(' '), header.find_last_of('}'));
  auto json = nlohmann::json::parse(header);
  EXPECT_EQ(json["a.f32"]["dtype"], "F32");
  EXPECT_EQ(json["b.bf16"]["dtype"], "BF16");
  EXPECT_EQ(json["c.f16"]["dtype"], "F16");
  EXPECT_EQ(json["a.f32"]["data_offsets"], (nlohmann::json{0, 48}));
  EXPECT_EQ(json["b.bf16"]["data_offsets"], (nlohmann::json{48, 72}));
  EXPECT_EQ(json["f.empty"]["shape"], (nlohmann::json{0, 5}));
  EXPECT_EQ(json["g.scalar"]["shape"], nlohmann::json::array());
  const std::string data = bytes.substr(8 + n);
  EXPECT_EQ(data.size(), 48u + 24 + 24 + 8 + 8 + 0 + 2);
  EXPECT_EQ(data.substr(0, 48), raw(kExact));
  std::vector<std::uint16_t> bf(kExact.size());
  for (std::size_t i = 0; i < bf.size(); ++i) bf[i] = f32_to_bf16(kExact[i]);
  EXPECT_EQ(data.substr(48, 24), raw(bf));
  EXPECT_EQ(data.substr(48, 4), std::string("\x00\x00\x00\x80", 4));  // 0.0, -0.0 as bf16, little-endian
}

TEST(Safetensors, WriteWithoutMetadataAndOverwrite) {
  TempDir dir;
  const std::string path = dir.path("w.safetensors");
  write_bytes(path, "old contents");
  SafetensorsWriter w;
  w.add_f32("x", DType::kF32, {2}, kExact.data() + 2);
  w.write(path);
  SafetensorsReader r(path);
  EXPECT_TRUE(r.metadata().is_object());
  EXPECT_TRUE(r.metadata().empty());
  const std::string bytes = read_bytes(path);
  EXPECT_EQ(static_cast<unsigned char>(bytes[0]) % 8, 0);
  EXPECT_FALSE(nlohmann::json::parse(bytes.substr(8, static_cast<unsigned char>(bytes[0]))).contains("__metadata__"));
  EXPECT_EQ(r.read_f32("x"), (std::vector<float>{1.5f, -2.25f}));
}

// A file written by Python's safetensors 0.8.0 (safetensors.numpy.save with metadata): F64 scalar, F32 [2, 3] and
// F16 [4] (0.5, -65504, smallest normal 2^-14, smallest subnormal 2^-24), "transformer." names, in that order.
TEST(Safetensors, ReadsPythonSafetensorsFile) {
  const std::string header =
      R"({"__metadata__":{"format":"pt","note":"python"},"scalar":{"dtype":"F64","shape":[],"data_offsets":[0,8]},)"
      R"("transformer.wpe.weight":{"dtype":"F32","shape":[2,3],"data_offsets":[8,32]},)"
      R"("transformer.h.0.ln_1.bias":{"dtype":"F16","shape":[4],"data_offsets":[32,40]}}   )";
  ASSERT_EQ(header.size(), 264u);
  const std::string data(
      "\x00\x00\x00\x00\x00\x00\x1d\x40"
      "\x00\x00\xc0\x3f\x00\x00\x00\xc0\x00\x00\x80\x3e\x00\x00\x40\x40\x00\x00\x00\x00\x00\x00\x00\xbe"
      "\x00\x38\xff\xfb\x00\x04\x01\x00",
      40);
  TempDir dir;
  const std::string path = dir.path("python.safetensors");
  write_bytes(path, std::string("\x08\x01\x00\x00\x00\x00\x00\x00", 8) + header + data);
  SafetensorsReader r(path);
  EXPECT_EQ(r.metadata(), (nlohmann::json{{"format", "pt"}, {"note", "python"}}));
  EXPECT_EQ(r.names(), (std::vector<std::string>{"scalar", "transformer.wpe.weight", "transformer.h.0.ln_1.bias"}));
  r.check_shape("wpe.weight", {2, 3});
  r.check_shape("h.0.ln_1.bias", {4});
  r.check_shape("scalar", {});
  EXPECT_EQ(r.info("scalar").dtype, DType::kF64);
  EXPECT_EQ(r.read_f32("scalar"), std::vector<float>{7.25f});
  EXPECT_EQ(r.read_f32("wpe.weight"), (std::vector<float>{1.5f, -2.0f, 0.25f, 3.0f, 0.0f, -0.125f}));
  EXPECT_EQ(r.read_f32("h.0.ln_1.bias"),
            (std::vector<float>{0.5f, -65504.0f, std::ldexp(1.0f, -14), std::ldexp(1.0f, -24)}));
}

TEST(Safetensors, TransformerPrefix) {
  TempDir dir;
  const std::string path = dir.path("hf.safetensors");
  SafetensorsWriter w;
  w.add_f32("transformer.h.0.ln_1.weight", DType::kF32, {4}, kExact.data());
  w.add_f32("wte.weight", DType::kF32, {2, 2}, kExact.data() + 4);
  w.write(path);
  SafetensorsReader r(path);
  EXPECT_TRUE(r.contains("h.0.ln_1.weight"));
  EXPECT_TRUE(r.contains("transformer.h.0.ln_1.weight"));
  EXPECT_EQ(r.info("h.0.ln_1.weight").name, "transformer.h.0.ln_1.weight");
  EXPECT_EQ(r.read_f32("h.0.ln_1.weight"), (std::vector<float>{0.0f, -0.0f, 1.5f, -2.25f}));
  EXPECT_TRUE(r.contains("transformer.wte.weight"));  // and the other way round
  EXPECT_EQ(r.info("transformer.wte.weight").name, "wte.weight");
  EXPECT_FALSE(r.contains("h.1.ln_1.weight"));
  EXPECT_FALSE(r.contains("ln_1.weight"));
  EXPECT_FALSE(r.contains("transformer.transformer.h.0.ln_1.weight"));  // only one prefix is ignored
  EXPECT_FALSE(r.contains("transformer.transformer.wte.weight"));
}

TEST(Safetensors, RangeReads) {
  TempDir dir;
  const std::string path = dir.path("range.safetensors");
  // More elements than one conversion chunk (65536), so chunked reads are exercised.
  const std::size_t n = 70001;
  std::vector<float> values(n);
  for (std::size_t i = 0; i < n; ++i)
    values[i] = static_cast<float>(static_cast<int>(i % 2001) - 1000);  // exact in f16
  SafetensorsWriter w;
  w.add_f32("f32", DType::kF32, {static_cast<std::int64_t>(n)}, values.data());
  w.add_f32("bf16", DType::kBF16, {7, 10000, 1}, values.data());
  w.add_f32("f16", DType::kF16, {static_cast<std::int64_t>(n)}, values.data());
  w.write(path);
  SafetensorsReader r(path);
  for (const char* name : {"f32", "f16"}) {
    std::vector<float> all = r.read_f32(name);
    ASSERT_EQ(all.size(), n);
    EXPECT_EQ(all, values) << name;
  }
  std::vector<float> bf = r.read_f32("bf16");
  ASSERT_EQ(bf.size(), 70000u);
  for (std::size_t i = 0; i < bf.size(); ++i) ASSERT_EQ(bf[i], bf16_to_f32(f32_to_bf16(values[i]))) << i;

  for (const char* name : {"f32", "bf16", "f16"}) {
    const std::size_t numel = r.info(name).numel();
    for (auto [begin, count] : std::vector<std::pair<std::size_t, std::size_t>>{
             {0, 1}, {3, 4}, {65530, 20}, {numel - 5, 5}, {numel, 0}, {17, 66000}}) {
      std::vector<float> out(count + 1, 42.0f);
      r.read_f32(name, begin, count, out.data());
      for (std::size_t i = 0; i < count; ++i)
        ASSERT_EQ(out[i], stored_as(name, values[begin + i])) << name << " " << begin;
      EXPECT_EQ(out[count], 42.0f) << "wrote past the range";
    }
    float sink[8];
    expect_error([&] { r.read_f32(name, numel - 2, 3, sink); }, ErrorCode::kInvalidArgument, {"out of range", name});
    expect_error([&] { r.read_f32(name, numel + 1, 0, sink); }, ErrorCode::kInvalidArgument, {"out of range"});
    expect_error([&] { r.read_f32(name, 1, std::numeric_limits<std::size_t>::max(), sink); },
                 ErrorCode::kInvalidArgument, {"out of range"});
  }
}

TEST(Safetensors, CheckShapeAndMissingTensor) {
  TempDir dir;
  const std::string path = dir.path("shapes.safetensors");
  SafetensorsWriter w;
  w.add_f32("x", DType::kF32, {3, 4}, kExact.data());
  w.write(path);
  SafetensorsReader r(path);
  r.check_shape("x", {3, 4});
  expect_error(
      [&] {
        r.check_shape("x", {4, 4});
      },
      ErrorCode::kIo, {"tensor 'x' in " + path + " has shape [3, 4], expected [4, 4]"});
  expect_error([&] { r.check_shape("x", {12}); }, ErrorCode::kIo, {"has shape [3, 4], expected [12]"});
  expect_error(
      [&] {
        r.check_shape("wpe.weight", {4, 4});
      },
      ErrorCode::kIo, {"missing tensor 'wpe.weight' in " + path});
  expect_error([&] { r.info("wpe.weight"); }, ErrorCode::kIo, {"missing tensor 'wpe.weight' in " + path});
  expect_error([&] { r.read_f32("wpe.weight"); }, ErrorCode::kIo, {"missing tensor 'wpe.weight'"});
  EXPECT_FALSE(r.contains("wpe.weight"));
}

// Tensors in any order, gaps and trailing bytes, zero-size tensors anywhere, extra entry fields, metadata of any
// values: all accepted. names() lists tensors in the order of their data.
TEST(Safetensors, AcceptsAnyOrderGapsAndExtras) {
  TempDir dir;
  const std::string path = dir.path("order.safetensors");
  const std::string header = R"({"late": {"dtype": "BF16", "shape": [2], "data_offsets": [12, 16], "extra": [1, 2]},)"
                             R"( "early": {"data_offsets": [0, 8], "shape": [1, 2], "dtype": "F32"},)"
                             R"( "empty": {"dtype": "F16", "shape": [0], "data_offsets": [4, 4]},)"
                             R"( "__metadata__": {"n": 3, "nested": {"a": [1]}}})";
  std::string data =
      raw(std::vector<float>{1.5f, -2.0f}) + "gap!" + raw(std::vector<std::uint16_t>{0x3fc0, 0xc000}) + "tail";
  write_bytes(path, safetensors_bytes(header, data));
  SafetensorsReader r(path);
  EXPECT_EQ(r.names(), (std::vector<std::string>{"early", "empty", "late"}));
  EXPECT_EQ(r.metadata()["n"], 3);
  EXPECT_EQ(r.read_f32("early"), (std::vector<float>{1.5f, -2.0f}));
  EXPECT_EQ(r.read_f32("late"), (std::vector<float>{1.5f, -2.0f}));
  EXPECT_TRUE(r.read_f32("empty").empty());
  EXPECT_EQ(r.info("late").begin, 12u);
  EXPECT_EQ(r.info("late").end, 16u);
}

// Nesting thousands deep (the fuzzer's finding: copying or printing such a value overflowed the stack) is refused while
// parsing, in the metadata and in an entry alike.
TEST(Safetensors, RefusesDeepNesting) {
  TempDir dir;
  const std::string deep = std::string(20000, '[') + std::string(20000, ']');
  for (const std::string& header : {R"({"__metadata__": {"x": )" + deep + "}}", R"({"t": )" + deep + "}"}) {
    const std::string path = dir.path("deep.safetensors");
    write_bytes(path, safetensors_bytes(header, ""));
    try {
      SafetensorsReader r(path);
      ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kIo);
      EXPECT_NE(std::string(e.what()).find("nests deeper than 16 levels"), std::string::npos) << e.what();
    }
  }
}

TEST(Safetensors, F64AndIntegerTensors) {
  TempDir dir;
  const std::string path = dir.path("ints.safetensors");
  const std::vector<double> d = {0.5, -1e300, 3.25};
  const std::vector<std::int32_t> i32 = {1, -2, 3};
  const std::vector<std::int64_t> i64 = {1ll << 40};
  SafetensorsWriter w;
  w.add_bytes("d", DType::kF64, {3}, d.data(), 24);
  w.add_bytes("i", DType::kI32, {3, 1}, i32.data(), 12);
  w.add_bytes("l", DType::kI64, {1}, i64.data(), 8);
  w.write(path);
  SafetensorsReader r(path);
  EXPECT_EQ(r.info("d").dtype, DType::kF64);
  EXPECT_EQ(r.info("i").dtype, DType::kI32);
  EXPECT_EQ(r.info("l").dtype, DType::kI64);
  std::vector<float> got = r.read_f32("d");
  EXPECT_EQ(got[0], 0.5f);
  EXPECT_TRUE(std::isinf(got[1]) && got[1] < 0);
  EXPECT_EQ(got[2], 3.25f);
  expect_error([&] { r.read_f32("i"); }, ErrorCode::kInvalidArgument, {"tensor 'i'", "is I32"});
  expect_error([&] { r.read_f32("l"); }, ErrorCode::kInvalidArgument, {"is I64"});
  const std::string bytes = read_bytes(path);
  EXPECT_EQ(bytes.substr(bytes.size() - 44), raw(d) + raw(i32) + raw(i64));
}

// Each malformed file is refused at open() with a kIo error naming the file, the tensor and the problem.
TEST(Safetensors, MalformedFilesAreRefused) {
  struct Case {
    const char* what;
    std::string bytes;
    std::vector<std::string> parts;
  };
  const std::string d8(8, '\0'), d12(12, '\0');
  auto entry = [](const std::string& fields) { return R"({"w": {)" + fields + "}}"; };
  const std::vector<Case> cases = {
      {"empty file", "", {"is 0 bytes, shorter than the 8-byte header length"}},
      {"7 bytes", std::string(7, '\x01'), {"is 7 bytes"}},
      {"header past the end", le64(100) + "{}      ", {"header length 100 runs past the end of the 16-byte file"}},
      {"absurd header length", le64(1ull << 40) + "{}", {"header length 1099511627776 is over the"}},
      {"max header length", le64(~0ull) + "{}", {"header length 18446744073709551615 is over the"}},
      {"empty header", le64(0), {"header is not valid JSON"}},
      {"truncated JSON", safetensors_bytes(R"({"w": {"dtype": )", ""), {"header is not valid JSON"}},
      {"garbage after JSON", safetensors_bytes("{} x", ""), {"header is not valid JSON"}},
      {"invalid UTF-8", safetensors_bytes("{\"w\xff\": 1}", ""), {"header is not valid JSON"}},
      {"JSON array", safetensors_bytes("[1, 2]", ""), {"header is a JSON array, expected an object"}},
      {"JSON string", safetensors_bytes("\"hi\"", ""), {"header is a JSON string, expected an object"}},
      {"entry not an object", safetensors_bytes(R"({"w": 3})", ""), {"tensor 'w'", "entry is 3"}},
      {"missing dtype",
       safetensors_bytes(entry(R"("shape": [2], "data_offsets": [0, 8])"), d8),
       {"tensor 'w'", "missing \"dtype\""}},
      {"missing shape",
       safetensors_bytes(entry(R"("dtype": "F32", "data_offsets": [0, 8])"), d8),
       {"tensor 'w'", "missing \"shape\""}},
      {"missing data_offsets",
       safetensors_bytes(entry(R"("dtype": "F32", "shape": [2])"), d8),
       {"tensor 'w'", "missing \"data_offsets\""}},
      {"dtype not a string",
       safetensors_bytes(entry(R"("dtype": 32, "shape": [2], "data_offsets": [0, 8])"), d8),
       {"tensor 'w'", "dtype is 32, not a string"}},
      {"unknown dtype",
       safetensors_bytes(entry(R"("dtype": "Q7", "shape": [2], "data_offsets": [0, 8])"), d8),
       {"tensor 'w'", "unknown dtype \"Q7\""}},
      {"lower-case dtype",
       safetensors_bytes(entry(R"("dtype": "f32", "shape": [2], "data_offsets": [0, 8])"), d8),
       {"tensor 'w'", "unknown dtype \"f32\""}},
      {"unsupported dtype",
       safetensors_bytes(entry(R"("dtype": "U8", "shape": [8], "data_offsets": [0, 8])"), d8),
       {"tensor 'w'", "unknown dtype \"U8\""}},
      {"shape not an array",
       safetensors_bytes(entry(R"("dtype": "F32", "shape": 2, "data_offsets": [0, 8])"), d8),
       {"tensor 'w'", "shape is 2, not an array"}},
      {"negative dim",
       safetensors_bytes(entry(R"("dtype": "F32", "shape": [1, -2], "data_offsets": [0, 8])"), d8),
       {"tensor 'w'", "shape[1] is -2, negative"}},
      {"fractional dim",
       safetensors_bytes(entry(R"("dtype": "F32", "shape": [2.5], "data_offsets": [0, 8])"), d8),
       {"tensor 'w'", "shape[0] is 2.5, not a non-negative integer"}},
      {"float dim",
       safetensors_bytes(entry(R"("dtype": "F32", "shape": [2.0], "data_offsets": [0, 8])"), d8),
       {"tensor 'w'", "shape[0] is 2.0, not a non-negative integer"}},
      {"string dim",
       safetensors_bytes(entry(R"("dtype": "F32", "shape": ["2"], "data_offsets": [0, 8])"), d8),
       {"tensor 'w'", "shape[0] is \"2\", not a non-negative integer"}},
      {"dim over int64",
       safetensors_bytes(entry(R"("dtype": "F32", "shape": [18446744073709551615], "data_offsets": [0, 8])"), d8),
       {"tensor 'w'", "shape[0] is 18446744073709551615, too large"}},
      {"numel overflow",
       safetensors_bytes(entry(R"("dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 8])"), d8),
       {"tensor 'w'", "shape [4294967296, 4294967296] has more bytes than 2^64"}},
      {"bytes overflow",
       safetensors_bytes(entry(R"("dtype": "F32", "shape": [4611686018427387904], "data_offsets": [0, 8])"), d8),
       {"tensor 'w'", "has more bytes than 2^64"}},
      {"offsets not an array",
       safetensors_bytes(entry(R"("dtype": "F32", "shape": [2], "data_offsets": 8)"), d8),
       {"tensor 'w'", "data_offsets is 8, expected [begin, end]"}},
      {"three offsets",
       safetensors_bytes(entry(R"("dtype": "F32", "shape": [2], "data_offsets": [0, 4, 8])"), d8),
       {"tensor 'w'", "data_offsets is [0,4,8], expected [begin, end]"}},
      {"negative offset",
       safetensors_bytes(entry(R"("dtype": "F32", "shape": [2], "data_offsets": [-8, 0])"), d8),
       {"tensor 'w'", "data_offsets[0] is -8, negative"}},
      {"float offset",
       safetensors_bytes(entry(R"("dtype": "F32", "shape": [2], "data_offsets": [0, 8.0])"), d8),
       {"tensor 'w'", "data_offsets[1] is 8.0, not a non-negative integer"}},
      {"end before begin",
       safetensors_bytes(entry(R"("dtype": "F32", "shape": [2], "data_offsets": [8, 0])"), d8),
       {"tensor 'w'", "data_offsets [8, 0] end before they begin"}},
      {"past the data",
       safetensors_bytes(entry(R"("dtype": "F32", "shape": [4], "data_offsets": [0, 16])"), d8),
       {"tensor 'w'", "data_offsets [0, 16] run past the data section's 8 bytes"}},
      {"huge offsets",
       safetensors_bytes(
           entry(R"("dtype": "F32", "shape": [2], "data_offsets": [18446744073709551608, 18446744073709551615])"), d8),
       {"tensor 'w'", "run past the data section"}},
      {"size mismatch",
       safetensors_bytes(entry(R"("dtype": "F32", "shape": [3], "data_offsets": [0, 8])"), d8),
       {"tensor 'w'", "data_offsets [0, 8] span 8 bytes, but shape [3] of F32 needs 12"}},
      {"bf16 size mismatch",
       safetensors_bytes(entry(R"("dtype": "BF16", "shape": [2], "data_offsets": [0, 8])"), d8),
       {"tensor 'w'", "span 8 bytes, but shape [2] of BF16 needs 4"}},
      {"overlap",
       safetensors_bytes(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
                         R"( "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
                         d12),
       {"tensor 'b' (bytes [4, 12)) overlaps tensor 'a' (bytes [0, 8))"}},
      {"overlap inside",
       safetensors_bytes(R"({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]},)"
                         R"( "b": {"dtype": "F16", "shape": [2], "data_offsets": [4, 8]}})",
                         d12),
       {"overlaps tensor 'a'"}},
      {"duplicate name",
       safetensors_bytes(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},)"
                         R"( "w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
                         d8),
       {"header names 'w' twice"}},
      {"metadata not an object",
       safetensors_bytes(R"({"__metadata__": "x"})", ""),
       {"__metadata__ is a JSON string, expected an object"}},
  };
  TempDir dir;
  int i = 0;
  for (const Case& c : cases) {
    const std::string path = dir.path("bad" + std::to_string(i++) + ".safetensors");
    write_bytes(path, c.bytes);
    std::vector<std::string> parts = c.parts;
    parts.push_back(path);
    SafetensorsReader r;
    expect_error([&] { r.open(path); }, ErrorCode::kIo, parts, c.what);
    EXPECT_TRUE(r.names().empty()) << c.what;
    EXPECT_TRUE(r.path().empty()) << c.what;
  }
  expect_error([&] { SafetensorsReader r(dir.path("absent.safetensors")); }, ErrorCode::kIo,
               {"cannot open safetensors file", "absent.safetensors", "No such file"});
  expect_error([&] { SafetensorsReader r(dir.path("")); }, ErrorCode::kIo,
               {"holds neither model.safetensors nor model.safetensors.index.json"});
}

// Every proper prefix of a valid file is refused with kIo; a file that shrinks after open fails the read with kIo.
TEST(Safetensors, TruncatedFiles) {
  TempDir dir;
  const std::string path = dir.path("full.safetensors");
  SafetensorsWriter w;
  w.add_f32("a", DType::kF32, {3}, kExact.data());
  w.add_f32("b", DType::kBF16, {5}, kExact.data());
  w.write(path, nlohmann::json{{"k", "v"}});
  const std::string full = read_bytes(path);
  const std::string cut = dir.path("cut.safetensors");
  for (std::size_t n = 0; n < full.size(); ++n) {
    write_bytes(cut, full.substr(0, n));
    expect_error([&] { SafetensorsReader r(cut); }, ErrorCode::kIo, {cut}, "prefix " + std::to_string(n));
  }
  write_bytes(cut, full);
  SafetensorsReader r(cut);
  fs::resize_file(cut, full.size() - 3);
  EXPECT_EQ(r.read_f32("a"), (std::vector<float>{0.0f, -0.0f, 1.5f}));
  expect_error([&] { r.read_f32("b"); }, ErrorCode::kIo, {cut, "truncated"});
}

// Any single corrupted byte gives a good file or a strata::Error, at open or at read: never a crash or another
// exception type.
TEST(Safetensors, CorruptedBytesNeverCrash) {
  TempDir dir;
  const std::string path = dir.path("good.safetensors");
  SafetensorsWriter w;
  w.add_f32("transformer.a", DType::kF16, {2, 2}, kExact.data());
  w.add_f32("b", DType::kF32, {3}, kExact.data());
  w.write(path, nlohmann::json{{"k", "v"}});
  const std::string good = read_bytes(path);
  const std::string bad = dir.path("bad.safetensors");
  int opened = 0, refused = 0;
  for (std::size_t pos = 0; pos < good.size(); ++pos) {
    for (char v : {'\0', '"', '}', '9', '-', '[', ',', '\xff'}) {
      std::string bytes = good;
      bytes[pos] = v;
      write_bytes(bad, bytes);
      try {
        SafetensorsReader r(bad);
        for (const std::string& name : r.names()) {
          std::vector<float> out = r.read_f32(name);
          EXPECT_EQ(out.size(), r.info(name).numel());
        }
        ++opened;
      } catch (const Error&) {
        ++refused;
      } catch (const std::exception& e) {
        ADD_FAILURE() << "byte " << pos << " = " << int(v) << ": not a strata::Error: " << e.what();
      }
    }
  }
  EXPECT_GT(opened, 0);
  EXPECT_GT(refused, 0);
}

TEST(Safetensors, ReaderMovesAndReopens) {
  TempDir dir;
  SafetensorsWriter w;
  w.add_f32("x", DType::kF32, {2}, kExact.data() + 2);
  w.write(dir.path("x.safetensors"));
  SafetensorsReader a(dir.path("x.safetensors"));
  SafetensorsReader b(std::move(a));
  EXPECT_FALSE(a.contains("x"));
  EXPECT_EQ(b.read_f32("x"), (std::vector<float>{1.5f, -2.25f}));
  SafetensorsReader c;
  c = std::move(b);
  EXPECT_EQ(c.read_f32("x"), (std::vector<float>{1.5f, -2.25f}));
  // A failed open leaves the reader closed, not holding the previous file.
  write_bytes(dir.path("bad.safetensors"), "nope");
  EXPECT_THROW(c.open(dir.path("bad.safetensors")), Error);
  EXPECT_FALSE(c.contains("x"));
  c.open(dir.path("x.safetensors"));
  EXPECT_TRUE(c.contains("x"));
}

TEST(Safetensors, WriterRefusesBadInput) {
  TempDir dir;
  const std::string path = dir.path("w.safetensors");
  SafetensorsWriter w;
  w.add_f32("x", DType::kF32, {2}, kExact.data());
  expect_error([&] { w.add_f32("x", DType::kF32, {2}, kExact.data()); }, ErrorCode::kInvalidArgument,
               {"'x' added twice"});
  expect_error([&] { w.add_f32("__metadata__", DType::kF32, {2}, kExact.data()); }, ErrorCode::kInvalidArgument,
               {"reserved"});
  expect_error([&] { w.add_f32("", DType::kF32, {2}, kExact.data()); }, ErrorCode::kInvalidArgument, {"reserved"});
  expect_error([&] { w.add_f32("bad\xff", DType::kF32, {2}, kExact.data()); }, ErrorCode::kInvalidArgument,
               {"not valid UTF-8"});
  expect_error(
      [&] {
        w.add_f32("neg", DType::kF32, {2, -1}, kExact.data());
      },
      ErrorCode::kInvalidArgument, {"'neg'", "bad shape [2, -1]"});
  expect_error([&] { w.add_f32("int", DType::kI32, {2}, kExact.data()); }, ErrorCode::kInvalidArgument,
               {"F32, BF16 or F16"});
  expect_error([&] { w.add_f32("null", DType::kF32, {2}, nullptr); }, ErrorCode::kInvalidArgument, {"null data"});
  expect_error([&] { w.add_bytes("short", DType::kBF16, {3}, kExact.data(), 4); }, ErrorCode::kInvalidArgument,
               {"'short': 4 bytes given for shape [3] of BF16"});
  EXPECT_EQ(w.size(), 1u);
  expect_error(
      [&] {
        w.write(path, nlohmann::json{{"step", 3}});
      },
      ErrorCode::kInvalidArgument, {"metadata 'step'", "strings"});
  expect_error([&] { w.write(path, nlohmann::json::array({1})); }, ErrorCode::kInvalidArgument, {"expected an object"});
  EXPECT_FALSE(fs::exists(path));
  w.write(path, nlohmann::json());  // null metadata: none
  EXPECT_TRUE(fs::exists(path));
}

// A write that fails leaves nothing behind: no .tmp, and the old file (here a directory in the way) untouched.
TEST(Safetensors, FailedWriteLeavesNoPartialFile) {
  TempDir dir;
  SafetensorsWriter w;
  w.add_f32("x", DType::kF32, {12}, kExact.data());
  expect_error([&] { w.write(dir.path("missing_dir/w.safetensors")); }, ErrorCode::kIo,
               {"cannot create", "missing_dir"});
  EXPECT_FALSE(fs::exists(dir.path("missing_dir")));
  const std::string blocked = dir.path("blocked");
  fs::create_directories(blocked + "/child");
  expect_error([&] { w.write(blocked); }, ErrorCode::kIo, {"cannot rename", blocked});
  EXPECT_FALSE(fs::exists(blocked + ".tmp"));
  EXPECT_TRUE(fs::is_directory(blocked + "/child"));
}

// ---- token data ----------------------------------------------------------------------------------------------------

// tokens[i] = 100 + i, so a window's first input names its offset.
std::vector<std::uint16_t> counting_tokens(int n) {
  std::vector<std::uint16_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = static_cast<std::uint16_t>(100 + i);
  return t;
}

struct Rows {
  std::vector<std::int32_t> inputs, targets;
  bool operator==(const Rows&) const = default;
};

Rows batch(const TokenFile& data, int step, int micro, int micro_batches, int world, int rank, int B, int T) {
  Rows r{std::vector<std::int32_t>(B * T, -1), std::vector<std::int32_t>(B * T, -1)};
  fill_batch(data, step, micro, micro_batches, world, rank, B, T, r.inputs.data(), r.targets.data());
  return r;
}

// The expected rows for the given window offsets into counting_tokens.
Rows windows(const std::vector<int>& offsets, int T) {
  Rows r;
  for (int off : offsets)
    for (int t = 0; t < T; ++t) {
      r.inputs.push_back(100 + off + t);
      r.targets.push_back(100 + off + t + 1);
    }
  return r;
}

// N = 20, T = 3, so M = 17 and offset = 3 g mod 17: g = 0..5 -> 0 3 6 9 12 15, g = 6 -> 18 mod 17 = 1, g = 7 -> 4,
// g = 11 -> 33 mod 17 = 16 (the last window: inputs 16..18, targets 17..19), g = 12 -> 2, g = 17 -> 0 again.
TEST(TokenData, WindowRuleByHand) {
  const TokenFile data = TokenFile::from_tokens(counting_tokens(20), 3);
  EXPECT_EQ(batch(data, 0, 0, 1, 1, 0, 2, 3), windows({0, 3}, 3));
  EXPECT_EQ(batch(data, 1, 0, 1, 1, 0, 2, 3), windows({6, 9}, 3));
  EXPECT_EQ(batch(data, 2, 0, 1, 1, 0, 2, 3), windows({12, 15}, 3));
  EXPECT_EQ(batch(data, 3, 0, 1, 1, 0, 2, 3), windows({1, 4}, 3));    // wrapped around
  EXPECT_EQ(batch(data, 5, 0, 1, 1, 0, 2, 3), windows({13, 16}, 3));  // g = 10, 11: the last window of the file
  EXPECT_EQ(batch(data, 6, 0, 1, 1, 0, 2, 3), windows({2, 5}, 3));
  EXPECT_EQ(batch(data, 17, 0, 1, 1, 0, 1, 3), windows({0}, 3));  // g = 17: 51 mod 17 = 0
  // The explicit last row: inputs 116 117 118, targets 117 118 119 (the file's last token).
  EXPECT_EQ(batch(data, 11, 0, 1, 1, 0, 1, 3).targets, (std::vector<std::int32_t>{117, 118, 119}));

  // W = 2, B = 2: rank r of step s reads g = 4s + 2r + b.
  EXPECT_EQ(batch(data, 0, 0, 1, 2, 1, 2, 3), windows({6, 9}, 3));
  EXPECT_EQ(batch(data, 1, 0, 1, 2, 1, 2, 3), windows({1, 4}, 3));  // g = 6, 7
  // A = 2, W = 3, B = 1: micro a of step s on rank r reads g = (2s + a) * 3 + r. s=1, a=1, r=2 -> g = 11 -> 16.
  EXPECT_EQ(batch(data, 1, 1, 2, 3, 2, 1, 3), windows({16}, 3));
  EXPECT_EQ(batch(data, 1, 0, 2, 3, 2, 1, 3), windows({7}, 3));  // g = 8 -> 24 mod 17 = 7

  // T = 4, N = 20, M = 16: offsets are multiples of 4 mod 16; g = 4 wraps to 0.
  const TokenFile data4 = TokenFile::from_tokens(counting_tokens(20), 4);
  EXPECT_EQ(batch(data4, 0, 0, 1, 1, 0, 3, 4), windows({0, 4, 8}, 4));
  EXPECT_EQ(batch(data4, 1, 0, 1, 1, 0, 3, 4), windows({12, 0, 4}, 4));
  // N = T + 1: one window, every row the same.
  const TokenFile tiny = TokenFile::from_tokens(counting_tokens(4), 3);
  EXPECT_EQ(batch(tiny, 7, 0, 1, 1, 0, 2, 3), windows({0, 0}, 3));
}

// A step's global batch depends only on W * B (and A): 1 rank x 4 rows == 2 ranks x 2 rows == 4 ranks x 1 row, and
// A micro-batches of B rows == one batch of A * B rows on one rank.
TEST(TokenData, GlobalBatchDependsOnlyOnWorldTimesRows) {
  const TokenFile data = TokenFile::from_tokens(synthetic_tokens(1000, 50257, 7), 16);
  for (int step : {0, 1, 5, 40, 1000003}) {
    Rows one = batch(data, step, 0, 1, 1, 0, 4, 16);
    Rows two;
    for (int r = 0; r < 2; ++r) {
      Rows part = batch(data, step, 0, 1, 2, r, 2, 16);
      two.inputs.insert(two.inputs.end(), part.inputs.begin(), part.inputs.end());
      two.targets.insert(two.targets.end(), part.targets.begin(), part.targets.end());
    }
    Rows four;
    for (int r = 0; r < 4; ++r) {
      Rows part = batch(data, step, 0, 1, 4, r, 1, 16);
      four.inputs.insert(four.inputs.end(), part.inputs.begin(), part.inputs.end());
      four.targets.insert(four.targets.end(), part.targets.begin(), part.targets.end());
    }
    EXPECT_EQ(one, two) << "step " << step;
    EXPECT_EQ(one, four) << "step " << step;
    // The targets are the inputs shifted by one.
    for (int b = 0; b < 4; ++b)
      for (int t = 0; t + 1 < 16; ++t) EXPECT_EQ(one.targets[b * 16 + t], one.inputs[b * 16 + t + 1]);
  }
  // Accumulation: step s with A = 2 and B = 2 on 1 rank covers the rows of step s with A = 1, B = 4.
  for (int step : {0, 3}) {
    Rows acc;
    for (int a = 0; a < 2; ++a) {
      Rows part = batch(data, step, a, 2, 1, 0, 2, 16);
      acc.inputs.insert(acc.inputs.end(), part.inputs.begin(), part.inputs.end());
      acc.targets.insert(acc.targets.end(), part.targets.begin(), part.targets.end());
    }
    EXPECT_EQ(acc, batch(data, step, 0, 1, 1, 0, 4, 16)) << "step " << step;
  }
}

// Far steps are exact: g * T mod M with g past 2^64 matches arithmetic done by hand in 128 bits.
TEST(TokenData, HugeStepsStayExact) {
  const TokenFile data = TokenFile::from_tokens(counting_tokens(1000), 7);  // M = 993
  const int step = std::numeric_limits<int>::max();
  const int A = 1 << 30, W = 1 << 30, B = 4;
  // g = ((s*A + a)*W + r)*B + b; compute g mod 993 step by step.
  const std::uint64_t m = 993;
  std::uint64_t g = ((static_cast<std::uint64_t>(step) % m) * (A % m) + 5) % m;
  g = (g * (W % m) + 3) % m;
  g = (g * B + 2) % m;
  const int offset = static_cast<int>(g * 7 % m);
  Rows got = batch(data, step, 5, A, W, 3, B, 7);
  const Rows row2{std::vector<std::int32_t>(got.inputs.begin() + 14, got.inputs.begin() + 21),
                  std::vector<std::int32_t>(got.targets.begin() + 14, got.targets.begin() + 21)};
  EXPECT_EQ(row2, windows({offset}, 7));
}

TEST(TokenData, FillBatchRefusesBadArguments) {
  const TokenFile data = TokenFile::from_tokens(counting_tokens(20), 3);
  std::vector<std::int32_t> in(64), tg(64);
  expect_error([&] { fill_batch(data, 0, 0, 1, 1, 0, 1, 20, in.data(), tg.data()); }, ErrorCode::kInvalidArgument,
               {"20 tokens, fewer than T + 1 = 21"});
  expect_error([&] { fill_batch(data, 0, 0, 1, 2, 2, 1, 3, in.data(), tg.data()); }, ErrorCode::kInvalidArgument,
               {"rank 2 of world 2"});
  expect_error([&] { fill_batch(data, 0, 2, 2, 1, 0, 1, 3, in.data(), tg.data()); }, ErrorCode::kInvalidArgument,
               {"micro-batch 2 of 2"});
  expect_error([&] { fill_batch(data, -1, 0, 1, 1, 0, 1, 3, in.data(), tg.data()); }, ErrorCode::kInvalidArgument,
               {"step -1"});
  expect_error([&] { fill_batch(data, 0, 0, 1, 1, 0, 0, 3, in.data(), tg.data()); }, ErrorCode::kInvalidArgument,
               {"B=0"});
}

TEST(TokenData, OpenChecksTheFile) {
  TempDir dir;
  // Little-endian uint16.
  const std::string le = dir.path("le.bin");
  write_bytes(le, std::string("\x01\x02\xff\x00\x00\x80\x07\x00", 8));
  TokenFile f = TokenFile::open(le, 3);
  EXPECT_EQ(f.size(), 4u);
  EXPECT_EQ(all_tokens(f), (std::vector<std::uint32_t>{0x0201, 0x00ff, 0x8000, 7}));
  EXPECT_EQ(f.max_token(), 0x8000);
  EXPECT_EQ(f.path(), le);

  expect_error([&] { TokenFile::open(dir.path("absent.bin"), 3); }, ErrorCode::kIo, {"absent.bin", "No such file"});
  expect_error([&] { TokenFile::open(dir.path(""), 3); }, ErrorCode::kIo, {"not a regular file"});
  const std::string odd = dir.path("odd.bin");
  write_bytes(odd, std::string(9, '\x01'));
  expect_error([&] { TokenFile::open(odd, 3); }, ErrorCode::kIo, {odd, "9 bytes, an odd size"});
  const std::string empty = dir.path("empty.bin");
  write_bytes(empty, "");
  expect_error([&] { TokenFile::open(empty, 1); }, ErrorCode::kIo, {empty, "has 0 tokens", "needs at least 2"});
  expect_error([&] { TokenFile::open(le, 4); }, ErrorCode::kIo,
               {le, "has 4 tokens; sequence length 4 needs at least 5"});
  expect_error([&] { TokenFile::open(le, 0); }, ErrorCode::kInvalidArgument, {"sequence length 0"});

  // The vocabulary check names the first bad token.
  const std::string toks = dir.path("toks.bin");
  write_tokens(toks, {1, 2, 3, 70, 5, 80});
  EXPECT_FALSE(fs::exists(toks + ".tmp"));
  EXPECT_EQ(TokenFile::open(toks, 5, 81).size(), 6u);
  EXPECT_EQ(TokenFile::open(toks, 5).size(), 6u);  // vocab 0: unchecked
  expect_error([&] { TokenFile::open(toks, 2, 50); }, ErrorCode::kIo, {toks, "token 70 at index 3 is >= vocab 50"});
  expect_error([&] { TokenFile::open(toks, 2, 80); }, ErrorCode::kIo, {"token 80 at index 5 is >= vocab 80"});
  expect_error(
      [&] {
        TokenFile::from_tokens({1, 2, 9}, 1, 9, "mem");
      },
      ErrorCode::kIo, {"'mem'", "token 9 at index 2"});
  EXPECT_EQ(TokenFile::open(le, 1, 65536).size(), 4u);
  EXPECT_EQ(TokenFile::open(le, 1, 65537).size(), 4u);  // a vocabulary beyond uint16 reads uint16 files too
}

// The same tokens from a Strata shard (uint16 and uint32), an llm.c .bin (GPT-2's and Llama 3's headers) and a plain
// uint16 file; shards by glob and by list, concatenated, windows across their boundaries; each bad shard named.
TEST(TokenData, ShardsOfEveryFormat) {
  TempDir dir;
  const std::vector<std::uint32_t> tokens = {5, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3};
  auto llmc = [&](const std::string& name, std::int32_t magic, std::int32_t version, int width,
                  std::int64_t count_delta = 0, std::size_t drop = 0) {
    std::string bytes(1024, '\0');
    const std::int32_t count = static_cast<std::int32_t>(static_cast<std::int64_t>(tokens.size()) + count_delta);
    std::memcpy(bytes.data(), &magic, 4);
    std::memcpy(bytes.data() + 4, &version, 4);
    std::memcpy(bytes.data() + 8, &count, 4);
    for (std::uint32_t t : tokens) bytes.append(reinterpret_cast<const char*>(&t), static_cast<std::size_t>(width));
    bytes.resize(bytes.size() - drop);
    write_bytes(dir.path(name), bytes);
    return dir.path(name);
  };
  auto strata = [&](const std::string& name, int width) {
    TokenShardWriter w(dir.path(name), width);
    w.append(tokens.data(), tokens.size());
    w.finish();
    return dir.path(name);
  };
  const std::vector<std::string> files = {strata("a.bin", 2), strata("b.bin", 4), llmc("c.bin", 20240520, 1, 2),
                                          llmc("d.bin", 20240801, 7, 4)};
  write_tokens(dir.path("e.bin"), std::vector<std::uint16_t>(tokens.begin(), tokens.end()));
  for (const std::string& f : {files[0], files[1], files[2], files[3], dir.path("e.bin")}) {
    SCOPED_TRACE(f);
    const TokenFile t = TokenFile::open(f, 4, 10);
    EXPECT_EQ(all_tokens(t), tokens);
    EXPECT_EQ(t.max_token(), 9u);
  }
  EXPECT_EQ(inspect_token_shard(files[1]).token_bytes, 4);
  EXPECT_EQ(inspect_token_shard(files[3]).format, ShardFormat::kLlmc);
  // All five by a glob (sorted: a .. e), and two by a list: one sequence; a window that crosses a boundary.
  const TokenFile all = TokenFile::open(dir.path("*.bin"), 4, 10);
  EXPECT_EQ(all.files().size(), 5u);
  EXPECT_EQ(all.size(), 5 * tokens.size());
  EXPECT_EQ(all.token_bytes(), 4);
  const TokenFile two = TokenFile::open(files[2] + "," + files[0], 4, 10);
  std::vector<std::uint32_t> window(6);
  two.copy(13, 6, window.data());
  EXPECT_EQ(window, (std::vector<std::uint32_t>{7, 9, 3, 5, 1, 4}));
  // Tokens beyond uint16, and the vocabulary check naming the shard and its own index.
  {
    TokenShardWriter w(dir.path("big.bin"), 4);
    const std::vector<std::uint32_t> big = {1, 128255, 70000, 3};
    w.append(big.data(), big.size());
    w.finish();
  }
  EXPECT_EQ(TokenFile::open(dir.path("big.bin"), 2, 128256).max_token(), 128255u);
  expect_error([&] { TokenFile::open(files[0] + "," + dir.path("big.bin"), 2, 100000); }, ErrorCode::kIo,
               {"big.bin", "token 128255 at index 1 is >= vocab 100000"});
  {
    TokenShardWriter narrow(dir.path("narrow.bin"), 2);
    const std::uint32_t wide = 70000;
    expect_error([&] { narrow.append(&wide, 1); }, ErrorCode::kInvalidArgument, {"70000", "does not fit uint16"});
  }
  EXPECT_FALSE(fs::exists(dir.path("narrow.bin"))) << "an unfinished shard leaves nothing";
  // Bad shards.
  const std::string truncated = llmc("trunc.bin", 20240520, 1, 2, 0, 3);
  expect_error([&] { TokenFile::open(truncated, 2); }, ErrorCode::kIo, {truncated, "(truncated)"});
  const std::string long_count = llmc("long.bin", 20240801, 7, 4, 5);
  expect_error([&] { TokenFile::open(long_count, 2); }, ErrorCode::kIo, {long_count, "counts 21 tokens"});
  const std::string version = llmc("version.bin", 20240520, 3, 2);
  expect_error([&] { TokenFile::open(version, 2); }, ErrorCode::kIo, {version, "version 3", "expected version 1"});
  expect_error([&] { TokenFile::open(dir.path("none_*.bin"), 2); }, ErrorCode::kIo,
               {"none_*.bin", "matches no file"});
}

// --shuffle: each epoch reads every one of its K = floor((N - T) / T) windows exactly once, at multiples of T, in an
// order of its own; the order depends on the seed and the row only (not on the ranks); unshuffled rows keep the rule.
TEST(TokenData, ShuffledWindowsVisitEachWindowOncePerEpoch) {
  const int T = 8;
  std::vector<std::uint16_t> tokens(1000);
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::uint16_t>(i % 7);
  TokenFile plain = TokenFile::from_tokens(tokens, T);
  TokenFile data = TokenFile::from_tokens(tokens, T);
  data.shuffle_windows(42);
  const std::uint64_t k = (1000 - T) / T;  // 124 windows an epoch
  std::vector<std::vector<std::uint64_t>> epochs;
  for (std::uint64_t e = 0; e < 3; ++e) {
    std::vector<std::uint64_t> order;
    for (std::uint64_t w = 0; w < k; ++w) order.push_back(window_offset(data, e * k + w, T));
    std::vector<std::uint64_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    for (std::uint64_t w = 0; w < k; ++w) ASSERT_EQ(sorted[w], w * T) << "epoch " << e;
    epochs.push_back(order);
  }
  EXPECT_NE(epochs[0], epochs[1]);
  EXPECT_NE(epochs[1], epochs[2]);
  std::vector<std::uint64_t> walk;
  for (std::uint64_t w = 0; w < k; ++w) walk.push_back(window_offset(plain, w, T));
  EXPECT_NE(epochs[0], walk) << "a shuffled epoch is not the walk";
  EXPECT_EQ(window_offset(plain, 500, T), (500 * T) % (1000 - T)) << "the rule without --shuffle";
  TokenFile other = TokenFile::from_tokens(tokens, T);
  other.shuffle_windows(43);
  EXPECT_NE(window_offset(other, 0, T) + window_offset(other, 1, T) * 1000,
            window_offset(data, 0, T) + window_offset(data, 1, T) * 1000);
  // The rows of a batch read their windows by the same function.
  std::vector<std::int32_t> in(2 * T), tg(2 * T);
  fill_rows(data, 130, 2, T, in.data(), tg.data());
  EXPECT_EQ(static_cast<std::uint64_t>(in[static_cast<std::size_t>(T)]), tokens[window_offset(data, 131, T)]);
}

TEST(TokenData, ByteLevelText) {
  TempDir dir;
  const std::string text = dir.path("text.txt");
  write_bytes(text, std::string("Hi\n\xff\x00z", 6));
  TokenFile f = TokenFile::from_text(text, 5);
  EXPECT_EQ(all_tokens(f), (std::vector<std::uint32_t>{'H', 'i', '\n', 255, 0, 'z'}));
  EXPECT_EQ(batch(f, 0, 0, 1, 1, 0, 1, 5), (Rows{{'H', 'i', '\n', 255, 0}, {'i', '\n', 255, 0, 'z'}}));
  expect_error([&] { TokenFile::from_text(text, 6); }, ErrorCode::kIo, {text, "has 6 tokens; sequence length 6"});
  expect_error([&] { TokenFile::from_text(dir.path("none.txt"), 6); }, ErrorCode::kIo, {"text file", "none.txt"});
}

// The spec's rule written out a second way: all draws first, then the tokens.
std::vector<std::uint16_t> reference_synthetic(std::uint64_t n, std::uint64_t vocab, std::uint64_t seed) {
  std::vector<std::uint64_t> draws(n);
  std::uint64_t state = seed;
  for (auto& r : draws) {
    state = state + 0x9E3779B97F4A7C15ull;
    std::uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    r = z ^ (z >> 31);
  }
  std::vector<std::uint16_t> t(n);
  for (std::uint64_t i = 0; i < n; ++i) {
    std::uint64_t hi = draws[i] >> 32;
    t[i] = static_cast<std::uint16_t>(i == 0 || draws[i] % 4 == 0 ? hi % vocab : (31 * t[i - 1] + 7 + hi % 3) % vocab);
  }
  return t;
}

TEST(TokenData, SyntheticMatchesIndependentImplementation) {
  for (std::uint64_t seed : {0ull, 1ull, 1234ull, ~0ull})
    for (int vocab : {1, 2, 7, 256, 50257, 65536})
      EXPECT_EQ(synthetic_tokens(2000, vocab, seed), reference_synthetic(2000, vocab, seed))
          << "seed " << seed << " vocab " << vocab;
  EXPECT_TRUE(synthetic_tokens(0, 5, 1).empty());
  expect_error([] { synthetic_tokens(4, 0, 1); }, ErrorCode::kInvalidArgument, {"vocab 0"});
  expect_error([] { synthetic_tokens(4, 65537, 1); }, ErrorCode::kInvalidArgument, {"vocab 65537"});
}

// Values computed with Python's arbitrary-precision integers (the rule taken from the spec, reduced mod 2^64).
TEST(TokenData, SyntheticMatchesPython) {
  EXPECT_EQ(synthetic_tokens(16, 50257, 1234),
            (std::vector<std::uint16_t>{41233, 20874, 44019, 7657, 36347, 21111, 1107, 34325, 8685, 17959, 3909, 20673,
                                        37787, 6747, 8137, 970}));
  EXPECT_EQ(synthetic_tokens(16, 256, 0),
            (std::vector<std::uint16_t>{57, 106, 222, 168, 95, 137, 160, 58, 13, 154, 173, 251, 108, 27, 78, 123}));
  EXPECT_EQ(synthetic_tokens(12, 65536, ~0ull), (std::vector<std::uint16_t>{29047, 48498, 61654, 10739, 5237, 31284,
                                                                            52307, 42040, 42760, 20734, 52939, 2718}));
  // splitmix64's published first output for seed 0 is 0xe220a8397b1dcdaf, so t_0 = 0xe220a839 % 65536 = 0xa839.
  EXPECT_EQ(synthetic_tokens(4, 65536, 0), (std::vector<std::uint16_t>{43065, 40554, 11998, 47272}));
  EXPECT_EQ(synthetic_tokens(8, 1, 7), std::vector<std::uint16_t>(8, 0));
  std::vector<std::uint16_t> long_run = synthetic_tokens(100000, 50257, 42);
  EXPECT_EQ(std::vector<std::uint16_t>(long_run.end() - 10, long_run.end()),
            (std::vector<std::uint16_t>{25301, 30485, 40416, 46735, 41597, 33089, 20628, 36392, 22505, 44322}));
  std::uint64_t sum = 0;
  for (auto t : long_run) sum += t;
  EXPECT_EQ(sum, 2516647420ull);
}

// The file is the same tokens, little-endian, including across the generator's 2^20-token chunks.
TEST(TokenData, MakeSyntheticFile) {
  TempDir dir;
  const std::string path = dir.path("synth.bin");
  const std::uint64_t n = (1u << 20) + 37;
  make_synthetic_tokens(path, n, 50257, 99);
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  EXPECT_EQ(fs::file_size(path), 2 * n);
  TokenFile f = TokenFile::open(path, 64, 50257);
  const std::vector<std::uint16_t> want = synthetic_tokens(n, 50257, 99);
  EXPECT_EQ(all_tokens(f), std::vector<std::uint32_t>(want.begin(), want.end()));
  make_synthetic_tokens(path, 3, 10, 5);  // overwrites
  EXPECT_EQ(read_bytes(path), raw(synthetic_tokens(3, 10, 5)));
  expect_error([&] { make_synthetic_tokens(dir.path("no/such/dir.bin"), 3, 10, 5); }, ErrorCode::kIo,
               {"cannot create", "no/such/dir.bin.tmp"});
}

}  // namespace
}  // namespace strata::gpt
