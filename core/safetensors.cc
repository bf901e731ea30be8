// SafetensorsReader (header validation, pread + conversion to f32) and SafetensorsWriter (header, conversion).
#include "core/safetensors.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <unordered_set>
#include <utility>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/fd_io.h"
#include "core/file_checks.h"
#include "core/json_schema.h"

namespace strata {

// Elements are read and written as the host lays them out; safetensors is little-endian.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

namespace {

constexpr std::uint64_t kMaxHeaderBytes = 100ull << 20;  // a longer header is not a weight file
constexpr std::size_t kChunkElements = 1 << 16;          // conversion buffer for reads and writes
constexpr const char* kPrefix = "transformer.";

std::optional<DType> parse_safetensors_dtype(const std::string& s) {
  if (s == "F32") return DType::kF32;
  if (s == "BF16") return DType::kBF16;
  if (s == "F16") return DType::kF16;
  if (s == "F64") return DType::kF64;
  if (s == "I32") return DType::kI32;
  if (s == "I64") return DType::kI64;
  return std::nullopt;
}

// a * b, or nullopt when it does not fit in 64 bits.
std::optional<std::uint64_t> checked_mul(std::uint64_t a, std::uint64_t b) {
  std::uint64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// Product of the dimensions, or nullopt on a negative dimension or overflow.
std::optional<std::uint64_t> checked_numel(const std::vector<std::int64_t>& shape) {
  std::uint64_t n = 1;
  for (std::int64_t d : shape) {
    if (d < 0) return std::nullopt;
    auto m = checked_mul(n, static_cast<std::uint64_t>(d));
    if (!m) return std::nullopt;
    n = *m;
  }
  return n;
}

// One non-negative integer of the header (a dimension or an offset); `what` names it in the error.
std::uint64_t header_uint(const nlohmann::json& v, std::uint64_t max, const std::string& where,
                          const std::string& what) {
  if (v.is_number_unsigned()) {
    std::uint64_t u = v.get<std::uint64_t>();
    STRATA_CHECK_CODE(ErrorCode::kIo, u <= max, "{}: {} is {}, too large", where, what, u);
    return u;
  }
  if (v.is_number_integer()) {
    std::int64_t i = v.get<std::int64_t>();
    STRATA_CHECK_CODE(ErrorCode::kIo, i >= 0, "{}: {} is {}, negative", where, what, i);
    return static_cast<std::uint64_t>(i);  // "-0"
  }
  STRATA_THROW(ErrorCode::kIo, "{}: {} is {}, not a non-negative integer", where, what, v.dump());
}

// The entry's field `key`, which must be present.
const nlohmann::json& header_field(const nlohmann::json& entry, const char* key, const std::string& where) {
  auto it = entry.find(key);
  STRATA_CHECK_CODE(ErrorCode::kIo, it != entry.end(), "{}: missing \"{}\"", where, key);
  return *it;
}

TensorInfo parse_entry(const std::string& name, const nlohmann::json& entry, std::uint64_t data_size,
                       const std::string& where) {
  STRATA_CHECK_CODE(ErrorCode::kIo, entry.is_object(),
                    "{}: entry is {}, expected an object with dtype, shape, data_offsets", where, entry.dump());
  TensorInfo t;
  t.name = name;

  const nlohmann::json& dtype = header_field(entry, "dtype", where);
  STRATA_CHECK_CODE(ErrorCode::kIo, dtype.is_string(), "{}: dtype is {}, not a string", where, dtype.dump());
  auto parsed = parse_safetensors_dtype(dtype.get<std::string>());
  STRATA_CHECK_CODE(ErrorCode::kIo, parsed.has_value(),
                    "{}: unknown dtype {} (this reader knows F32, BF16, F16, F64, I32, I64)", where, dtype.dump());
  t.dtype = *parsed;

  const nlohmann::json& shape = header_field(entry, "shape", where);
  STRATA_CHECK_CODE(ErrorCode::kIo, shape.is_array(), "{}: shape is {}, not an array", where, shape.dump());
  for (std::size_t i = 0; i < shape.size(); ++i)
    t.shape.push_back(static_cast<std::int64_t>(
        header_uint(shape[i], static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()), where,
                    fmt::format("shape[{}]", i))));
  auto numel = checked_numel(t.shape);
  std::optional<std::uint64_t> bytes = numel ? checked_mul(*numel, dtype_size(t.dtype)) : std::nullopt;
  STRATA_CHECK_CODE(ErrorCode::kIo, bytes.has_value(), "{}: shape {} has more bytes than 2^64", where,
                    shape_string(t.shape));

  const nlohmann::json& offsets = header_field(entry, "data_offsets", where);
  STRATA_CHECK_CODE(ErrorCode::kIo, offsets.is_array() && offsets.size() == 2,
                    "{}: data_offsets is {}, expected [begin, end]", where, offsets.dump());
  t.begin = header_uint(offsets[0], std::numeric_limits<std::uint64_t>::max(), where, "data_offsets[0]");
  t.end = header_uint(offsets[1], std::numeric_limits<std::uint64_t>::max(), where, "data_offsets[1]");
  STRATA_CHECK_CODE(ErrorCode::kIo, t.begin <= t.end, "{}: data_offsets [{}, {}] end before they begin", where, t.begin,
                    t.end);
  STRATA_CHECK_CODE(ErrorCode::kIo, t.end <= data_size,
                    "{}: data_offsets [{}, {}] run past the data section's {} bytes (truncated file?)", where, t.begin,
                    t.end, data_size);
  STRATA_CHECK_CODE(ErrorCode::kIo, t.end - t.begin == *bytes,
                    "{}: data_offsets [{}, {}] span {} bytes, but shape {} of {} needs {}", where, t.begin, t.end,
                    t.end - t.begin, shape_string(t.shape), safetensors_dtype_name(t.dtype), *bytes);
  return t;
}

}  // namespace

std::uint64_t TensorInfo::numel() const { return checked_numel(shape).value_or(0); }

const char* safetensors_dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "F32";
    case DType::kBF16: return "BF16";
    case DType::kF16: return "F16";
    case DType::kF64: return "F64";
    case DType::kI32: return "I32";
    case DType::kI64: return "I64";
  }
  return "?";
}

// ---- SafetensorsReader ---------------------------------------------------------------------------------------------

SafetensorsReader::~SafetensorsReader() { close(); }

SafetensorsReader::SafetensorsReader(SafetensorsReader&& other) noexcept { *this = std::move(other); }

SafetensorsReader& SafetensorsReader::operator=(SafetensorsReader&& other) noexcept {
  if (this != &other) {
    close();
    path_ = std::move(other.path_);
    files_ = std::exchange(other.files_, {});
    file_of_ = std::move(other.file_of_);
    tensors_ = std::move(other.tensors_);
    index_ = std::move(other.index_);
    metadata_ = std::move(other.metadata_);
    bytes_read_.store(other.bytes_read_.load());
    other.close();
  }
  return *this;
}

void SafetensorsReader::close() {
  for (File& f : files_)
    if (f.fd >= 0) ::close(f.fd);
  files_.clear();
  file_of_.clear();
  path_.clear();
  tensors_.clear();
  index_.clear();
  metadata_ = nlohmann::json::object();
  bytes_read_.store(0);
}

void SafetensorsReader::open(const std::string& path) {
  close();
  path_ = path;
  try {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (fs::is_directory(path, ec)) {
      // A Hugging Face model directory: its index when it has one, else its one file.
      const std::string index = path + "/model.safetensors.index.json", single = path + "/model.safetensors";
      if (fs::exists(index, ec))
        open_index(index);
      else if (fs::exists(single, ec))
        open_file(single, &metadata_);
      else
        STRATA_THROW(ErrorCode::kIo,
                     "model directory '{}' holds neither model.safetensors nor model.safetensors.index.json", path);
    } else if (path.ends_with(".index.json")) {
      open_index(path);
    } else {
      open_file(path, &metadata_);
    }
    for (std::size_t i = 0; i < tensors_.size(); ++i) index_.emplace(tensors_[i].name, i);
  } catch (...) {
    close();
    throw;
  }
}

std::size_t SafetensorsReader::open_file(const std::string& path, nlohmann::json* metadata) {
  const int fd = open_input_file(path, "safetensors file");  // a FIFO or device is refused before it can block
  // Owned by *this from here, so every throw below closes it (the next open() or the destructor does).
  files_.push_back(File{path, fd, 0});
  const std::size_t file = files_.size() - 1, first = tensors_.size();
  struct stat st;
  STRATA_CHECK_CODE(ErrorCode::kIo, ::fstat(fd, &st) == 0, "cannot stat '{}': {}", path, std::strerror(errno));
  STRATA_CHECK_CODE(ErrorCode::kIo, S_ISREG(st.st_mode), "'{}' is not a regular file", path);
  const auto file_size = static_cast<std::uint64_t>(st.st_size);
  STRATA_CHECK_CODE(ErrorCode::kIo, file_size >= 8,
                    "'{}' is {} bytes, shorter than the 8-byte header length of a safetensors file", path, file_size);

  unsigned char len_bytes[8];
  pread_all(fd, len_bytes, 8, 0, "'" + path + "'");
  std::uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | len_bytes[i];
  STRATA_CHECK_CODE(ErrorCode::kIo, header_len <= kMaxHeaderBytes,
                    "'{}': header length {} is over the {}-byte limit (not a safetensors file?)", path, header_len,
                    kMaxHeaderBytes);
  STRATA_CHECK_CODE(ErrorCode::kIo, header_len <= file_size - 8,
                    "'{}': header length {} runs past the end of the {}-byte file (truncated?)", path, header_len,
                    file_size);
  files_[file].data_start = 8 + header_len;
  const std::uint64_t data_size = file_size - files_[file].data_start;

  std::string text(header_len, '\0');
  pread_all(fd, text.data(), text.size(), 8, "'" + path + "'");
  // JSON objects may repeat a key (the last one wins); a weight file must not, so the parser reports them.
  // Nesting is bounded while parsing: a header nests 3 levels, and copying or printing a value nested thousands
  // deep recurses past the stack (nlohmann::json's parser itself does not recurse).
  constexpr int kMaxDepth = 16;
  std::unordered_set<std::string> seen;
  std::string duplicate;
  bool too_deep = false;
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text, [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
      if (depth > kMaxDepth) too_deep = true;
      if (too_deep) return false;
      if (event == nlohmann::json::parse_event_t::key && depth == 1 && duplicate.empty() &&
          !seen.insert(parsed.get<std::string>()).second)
        duplicate = parsed.get<std::string>();
      return true;
    });
  } catch (const nlohmann::json::exception& e) {
    STRATA_THROW(ErrorCode::kIo, "'{}': header is not valid JSON: {}", path, e.what());
  }
  STRATA_CHECK_CODE(ErrorCode::kIo, !too_deep, "'{}': header nests deeper than {} levels", path, kMaxDepth);
  STRATA_CHECK_CODE(ErrorCode::kIo, header.is_object(), "'{}': header is a JSON {}, expected an object", path,
                    header.type_name());
  STRATA_CHECK_CODE(ErrorCode::kIo, duplicate.empty(), "'{}': header names '{}' twice", path, duplicate);

  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      STRATA_CHECK_CODE(ErrorCode::kIo, entry.is_object(), "'{}': __metadata__ is a JSON {}, expected an object", path,
                        entry.type_name());
      if (metadata) *metadata = entry;
      continue;
    }
    tensors_.push_back(parse_entry(name, entry, data_size, fmt::format("'{}': tensor '{}'", path, name)));
    tensors_.back().file = path;
    file_of_.push_back(file);
  }

  std::sort(
      tensors_.begin() + static_cast<std::ptrdiff_t>(first), tensors_.end(),
      [](const TensorInfo& a, const TensorInfo& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
  const TensorInfo* prev = nullptr;  // the non-empty tensor reaching furthest so far
  for (std::size_t i = first; i < tensors_.size(); ++i) {
    const TensorInfo& t = tensors_[i];
    if (t.begin == t.end) continue;
    STRATA_CHECK_CODE(ErrorCode::kIo, prev == nullptr || t.begin >= prev->end,
                      "'{}': tensor '{}' (bytes [{}, {})) overlaps tensor '{}' (bytes [{}, {}))", path, t.name, t.begin,
                      t.end, prev->name, prev->begin, prev->end);
    if (prev == nullptr || t.end > prev->end) prev = &t;
  }
  return first;
}

void SafetensorsReader::open_index(const std::string& index_path) {
  namespace fs = std::filesystem;
  const nlohmann::json index = read_json_file(index_path, "safetensors index", std::size_t{64} << 20, ErrorCode::kIo);
  STRATA_CHECK_CODE(
      ErrorCode::kIo, index.is_object() && index.contains("weight_map") && index["weight_map"].is_object(),
      "'{}': expected an object with a \"weight_map\" object (a model.safetensors.index.json)", index_path);
  if (index.contains("metadata")) {
    STRATA_CHECK_CODE(ErrorCode::kIo, index["metadata"].is_object(),
                      "'{}': \"metadata\" is a JSON {}, expected an object", index_path, index["metadata"].type_name());
    metadata_ = index["metadata"];
  }
  const nlohmann::json& map = index["weight_map"];
  STRATA_CHECK_CODE(ErrorCode::kIo, !map.empty(), "'{}': its weight_map names no tensor", index_path);
  // The shards, in name order (model-00001-of-0000N first), each with the first tensor the index gives it.
  std::map<std::string, std::string> shards;
  for (const auto& [name, shard] : map.items()) {
    STRATA_CHECK_CODE(ErrorCode::kIo, shard.is_string(), "'{}': weight_map[\"{}\"] is a JSON {}, expected a file name",
                      index_path, name, shard.type_name());
    const std::string file = shard.get<std::string>();
    STRATA_CHECK_CODE(
        ErrorCode::kIo, !file.empty() && file.find('/') == std::string::npos && file != "." && file != "..",
        "'{}': weight_map[\"{}\"] is '{}', not the name of a file beside the index", index_path, name, file);
    shards.emplace(file, name);
  }
  const std::string dir = fs::path(index_path).parent_path().string();
  std::unordered_map<std::string, std::string> shard_of;  // tensor -> the shard holding it
  for (const auto& [file, first_tensor] : shards) {
    const std::string path = (dir.empty() ? std::string(".") : dir) + "/" + file;
    std::error_code ec;
    STRATA_CHECK_CODE(ErrorCode::kIo, fs::exists(path, ec), "'{}' maps tensor '{}' to shard '{}', which does not exist",
                      index_path, first_tensor, path);
    const std::size_t first = open_file(path, nullptr);
    for (std::size_t i = first; i < tensors_.size(); ++i) {
      const std::string& name = tensors_[i].name;
      const auto [at, fresh] = shard_of.emplace(name, path);
      STRATA_CHECK_CODE(ErrorCode::kIo, fresh, "'{}': tensor '{}' is in two shards, '{}' and '{}'", index_path, name,
                        at->second, path);
      const auto listed = map.find(name);
      STRATA_CHECK_CODE(ErrorCode::kIo, listed != map.end(),
                        "'{}': shard '{}' holds tensor '{}', which the index does "
                        "not list",
                        index_path, path, name);
      STRATA_CHECK_CODE(ErrorCode::kIo, listed->get<std::string>() == file,
                        "'{}' maps tensor '{}' to shard '{}', "
                        "but it is in '{}'",
                        index_path, name, listed->get<std::string>(), path);
    }
  }
  for (const auto& [name, shard] : map.items())
    STRATA_CHECK_CODE(ErrorCode::kIo, shard_of.count(name) > 0,
                      "'{}' maps tensor '{}' to shard '{}/{}', which lacks it", index_path, name, dir,
                      shard.get<std::string>());
}

const TensorInfo* SafetensorsReader::find(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) {
    // Names match when equal after removing one leading "transformer." from each.
    const std::string bare = name.starts_with(kPrefix) ? name.substr(std::strlen(kPrefix)) : name;
    if (!bare.starts_with(kPrefix)) {
      it = index_.find(bare);
      if (it == index_.end()) it = index_.find(kPrefix + bare);
    }
  }
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

std::vector<std::string> SafetensorsReader::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const TensorInfo& t : tensors_) out.push_back(t.name);
  return out;
}

bool SafetensorsReader::contains(const std::string& name) const { return find(name) != nullptr; }

const TensorInfo& SafetensorsReader::info(const std::string& name) const {
  const TensorInfo* t = find(name);
  STRATA_CHECK_CODE(ErrorCode::kIo, t != nullptr, "missing tensor '{}' in {}", name,
                    path_.empty() ? "(no file open)" : path_);
  return *t;
}

void SafetensorsReader::check_shape(const std::string& name, const std::vector<std::int64_t>& expected) const {
  const TensorInfo& t = info(name);
  STRATA_CHECK_CODE(ErrorCode::kIo, t.shape == expected, "tensor '{}' in {} has shape {}, expected {}", t.name, t.file,
                    shape_string(t.shape), shape_string(expected));
}

void SafetensorsReader::read_f32(const std::string& name, std::size_t element_begin, std::size_t count,
                                 float* out) const {
  const TensorInfo& t = info(name);
  const File& f = files_[file_of_[static_cast<std::size_t>(&t - tensors_.data())]];
  const std::uint64_t numel = t.numel();
  STRATA_CHECK(element_begin <= numel && count <= numel - element_begin,
               "tensor '{}' in {}: {} elements from index {} are out of range of its {} elements", t.name, f.path,
               count, element_begin, numel);
  if (count == 0) return;
  STRATA_CHECK(out != nullptr, "null output for tensor '{}'", t.name);
  const std::size_t esize = dtype_size(t.dtype);
  const std::uint64_t offset = f.data_start + t.begin + element_begin * esize;
  if (t.dtype != DType::kI32 && t.dtype != DType::kI64) bytes_read_.fetch_add(count * esize, std::memory_order_relaxed);
  switch (t.dtype) {
    case DType::kF32: pread_all(f.fd, out, count * sizeof(float), offset, "'" + f.path + "'"); return;
    case DType::kBF16:
    case DType::kF16: {
      std::vector<std::uint16_t> buf(std::min(count, kChunkElements));
      const bool bf16 = t.dtype == DType::kBF16;
      for (std::size_t done = 0; done < count;) {
        std::size_t n = std::min(count - done, buf.size());
        pread_all(f.fd, buf.data(), n * 2, offset + done * 2, "'" + f.path + "'");
        for (std::size_t i = 0; i < n; ++i) out[done + i] = bf16 ? bf16_to_f32(buf[i]) : f16_to_f32(buf[i]);
        done += n;
      }
      return;
    }
    case DType::kF64: {
      std::vector<double> buf(std::min(count, kChunkElements));
      for (std::size_t done = 0; done < count;) {
        std::size_t n = std::min(count - done, buf.size());
        pread_all(f.fd, buf.data(), n * 8, offset + done * 8, "'" + f.path + "'");
        for (std::size_t i = 0; i < n; ++i) out[done + i] = static_cast<float>(buf[i]);
        done += n;
      }
      return;
    }
    case DType::kI32:
    case DType::kI64: break;
  }
  STRATA_THROW(ErrorCode::kInvalidArgument, "tensor '{}' in {} is {}; read_f32 reads F32, BF16, F16 and F64", t.name,
               f.path, safetensors_dtype_name(t.dtype));
}

std::vector<float> SafetensorsReader::read_f32(const std::string& name) const {
  std::vector<float> out(info(name).numel());
  read_f32(name, 0, out.size(), out.data());
  return out;
}

// ---- SafetensorsWriter ---------------------------------------------------------------------------------------------

void SafetensorsWriter::add(Entry e) {
  STRATA_CHECK(!e.name.empty() && e.name != "__metadata__", "tensor name '{}' is reserved", e.name);
  try {
    (void)nlohmann::json(e.name).dump();
  } catch (const nlohmann::json::exception&) {
    STRATA_THROW(ErrorCode::kInvalidArgument, "tensor name '{}' is not valid UTF-8", e.name);
  }
  for (const Entry& other : entries_) STRATA_CHECK(other.name != e.name, "tensor '{}' added twice", e.name);
  auto numel = checked_numel(e.shape);
  STRATA_CHECK(numel && checked_mul(*numel, dtype_size(e.dtype)), "tensor '{}': bad shape {}", e.name,
               shape_string(e.shape));
  e.numel = *numel;
  entries_.push_back(std::move(e));
}

void SafetensorsWriter::add_f32(const std::string& name, DType dtype, std::vector<std::int64_t> shape,
                                const float* data) {
  STRATA_CHECK(dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16,
               "tensor '{}': f32 data can be stored as F32, BF16 or F16, not {}", name, dtype_name(dtype));
  Entry e{name, dtype, std::move(shape), 0, data, nullptr};
  STRATA_CHECK(data != nullptr || checked_numel(e.shape) == std::optional<std::uint64_t>(0), "tensor '{}': null data",
               name);
  add(std::move(e));
}

void SafetensorsWriter::add_bytes(const std::string& name, DType dtype, std::vector<std::int64_t> shape,
                                  const void* data, std::size_t bytes) {
  Entry e{name, dtype, std::move(shape), 0, nullptr, data};
  auto numel = checked_numel(e.shape);
  STRATA_CHECK(numel && checked_mul(*numel, dtype_size(dtype)) == std::optional<std::uint64_t>(bytes),
               "tensor '{}': {} bytes given for shape {} of {}", name, bytes, shape_string(e.shape),
               safetensors_dtype_name(dtype));
  STRATA_CHECK(data != nullptr || bytes == 0, "tensor '{}': null data", name);
  add(std::move(e));
}

void SafetensorsWriter::declare(const std::string& name, DType dtype, std::vector<std::int64_t> shape) {
  add(Entry{name, dtype, std::move(shape), 0, nullptr, nullptr});
}

std::string SafetensorsWriter::header(const nlohmann::json& metadata, std::vector<std::uint64_t>* offsets) const {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.is_null() && !(metadata.is_object() && metadata.empty())) {
    STRATA_CHECK(metadata.is_object(), "safetensors metadata is a JSON {}, expected an object", metadata.type_name());
    for (const auto& [key, value] : metadata.items())
      STRATA_CHECK(value.is_string(), "safetensors metadata '{}' is {}; its values are strings", key, value.dump());
    header["__metadata__"] = metadata;
  }
  std::uint64_t offset = 0;
  std::vector<std::uint64_t> begins;
  for (const Entry& e : entries_) {
    const std::uint64_t bytes = e.numel * dtype_size(e.dtype);
    header[e.name] = {
        {"dtype", safetensors_dtype_name(e.dtype)}, {"shape", e.shape}, {"data_offsets", {offset, offset + bytes}}};
    begins.push_back(offset);
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<std::size_t>(i)] = static_cast<char>(static_cast<std::uint64_t>(text.size()) >> (8 * i));
  out += text;
  if (offsets) {
    offsets->clear();
    for (std::uint64_t b : begins) offsets->push_back(out.size() + b);
  }
  return out;
}

void SafetensorsWriter::write(const std::string& path, const nlohmann::json& metadata) const {
  for (const Entry& e : entries_)
    STRATA_CHECK(e.f32 != nullptr || e.bytes != nullptr || e.numel == 0,
                 "tensor '{}' was declared without data: write() needs it ({})", e.name, path);
  const std::string head = header(metadata, nullptr);
  AtomicFile file(path);
  file.write(head.data(), head.size());
  std::vector<std::uint16_t> buf;
  for (const Entry& e : entries_) {
    if (e.bytes != nullptr || e.dtype == DType::kF32) {
      file.write(e.bytes != nullptr ? e.bytes : e.f32, e.numel * dtype_size(e.dtype));
      continue;
    }
    buf.resize(std::min<std::uint64_t>(e.numel, kChunkElements));
    const bool bf16 = e.dtype == DType::kBF16;
    for (std::uint64_t done = 0; done < e.numel;) {
      std::size_t n = std::min<std::uint64_t>(e.numel - done, buf.size());
      for (std::size_t i = 0; i < n; ++i) buf[i] = bf16 ? f32_to_bf16(e.f32[done + i]) : f32_to_f16(e.f32[done + i]);
      file.write(buf.data(), n * 2);
      done += n;
    }
  }
  file.commit();
}

}  // namespace strata
