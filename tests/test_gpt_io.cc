// GPT data and weight file tests: safetensors round trips, interop and malformed files; token files, the batch
// window rule and the synthetic generator (checked against an independent implementation and Python's values).
#include <gtest/gtest.h>
#include <unistd.h>

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

#include "examples/gpt/safetensors.h"
#include "examples/gpt/token_data.h"
#include "runtime/core/dtype.h"
#include "runtime/core/error.h"

namespace strata::gpt {
namespace {

namespace fs = std::filesystem;

// A fresh directory per test under the system temp dir, removed afterwards.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    dir_ = fs::temp_directory_path() / ("strata_gpt_io_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
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
std::string safetensors_bytes(const std::string& header, const std::string& data) { return le64(header.size()) + header + data; }

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
    for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << context << ": '" << p << "' not in: " << e.what();
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
const std::vector<float> kExact = {0.0f, -0.0f, 1.5f, -2.25f, 0.25f, 3.0f, 1024.0f, -0.0078125f, 7.5f, 96.0f, -1.0f, 0.5f};

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
  EXPECT_EQ(r.names(), (std::vector<std::string>{"a.f32", "b.bf16", "c.f16", "d.bf16", "e.f16", "f.empty", "g.scalar"}));
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
  EXPECT_EQ(nlohmann::json::parse(read_bytes(path).substr(8, 40)).contains("__metadata__"), false);
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
  EXPECT_FALSE(r.contains("transformer.transformer.h.0.ln_1.weight"));
}

TEST(Safetensors, RangeReads) {
  TempDir dir;
  const std::string path = dir.path("range.safetensors");
  // More elements than one conversion chunk (65536), so chunked reads are exercised.
  const std::size_t n = 70001;
  std::vector<float> values(n);
  for (std::size_t i = 0; i < n; ++i) values[i] = static_cast<float>(static_cast<int>(i % 2001) - 1000);  // exact in f16
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
      for (std::size_t i = 0; i < count; ++i) ASSERT_EQ(out[i], stored_as(name, values[begin + i])) << name << " " << begin;
      EXPECT_EQ(out[count], 42.0f) << "wrote past the range";
    }
    float sink[8];
    expect_error([&] { r.read_f32(name, numel - 2, 3, sink); }, ErrorCode::kInvalidArgument, {"out of range", name});
    expect_error([&] { r.read_f32(name, numel + 1, 0, sink); }, ErrorCode::kInvalidArgument, {"out of range"});
    expect_error([&] { r.read_f32(name, 1, std::numeric_limits<std::size_t>::max(), sink); },
                 ErrorCode::kInvalidArgument, {"out of range"});
  }
}

