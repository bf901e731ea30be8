// damage_checkpoint: damages a committed checkpoint the way its checksums cannot see, for the value tests
// (values_runs.cmake). Every kind but `digit` leaves the checkpoint's checksums valid: the block's CRC-32 and the
// index's own are recomputed after the change.
//   damage_checkpoint STEP_DIR value TENSOR_PREFIX VALUE [ELEMENT]
//                                                          element ELEMENT (default 0) of the first chunk of the first
//                                                          tensor named TENSOR_PREFIX... (in name order) becomes VALUE
//                                                          (nan, inf, -inf, a number)
//   damage_checkpoint STEP_DIR state KEY JSON              state.trainer.KEY (or state.optimizer.KEY when KEY is
//                                                          "optimizer.NAME") becomes JSON
//   damage_checkpoint STEP_DIR digit                       one digit of the index changes (its checksum does not)
//   damage_checkpoint STEP_DIR no-checksum                 the index as a Strata before index checksums wrote it
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "core/error.h"
#include "runtime/checkpoint/checkpoint_index.h"
#include "runtime/checkpoint/chunk_file.h"

namespace {

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

void write_all(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
  if (!f) throw std::runtime_error("cannot write " + path);
}

int damage(int argc, char** argv) {
  const std::string dir = argv[1], kind = argv[2];
  const std::string index_path = dir + "/index.json";
  const std::string text = read_all(index_path);
  strata::CheckpointIndex index = strata::CheckpointIndex::parse(text, index_path);
  if (kind == "value" && (argc == 5 || argc == 6)) {
    const std::string prefix = argv[3];
    const float value = std::strtof(argv[4], nullptr);
    const std::uint64_t element = argc == 6 ? std::strtoull(argv[5], nullptr, 10) : 0;
    for (auto& [name, t] : index.tensors) {
      if (name.rfind(prefix, 0) != 0 || t.chunks.empty()) continue;
      strata::ChunkRecord& c = t.chunks.front();
      if (element >= c.count) {
        std::fprintf(stderr, "damage_checkpoint: %s's first chunk has %llu elements\n", name.c_str(),
                     static_cast<unsigned long long>(c.count));
        return 1;
      }
      const std::string file = dir + "/" + index.files[static_cast<std::size_t>(c.file)].name;
      std::string bytes = read_all(file);
      std::memcpy(&bytes[c.offset + element * 4], &value, 4);  // element c.begin + element of the chunk's box
      const std::uint64_t block = element * 4 / index.block_bytes, at = block * index.block_bytes;
      const std::uint64_t len = std::min<std::uint64_t>(index.block_bytes, c.count * 4 - at);
      c.crc32[block] = strata::crc32_of(bytes.data() + c.offset + at, len);
      write_all(file, bytes);
      write_all(index_path, index.serialize());
      std::printf("damage_checkpoint: %s element %llu of its box is now %g (checksums recomputed)\n", name.c_str(),
                  static_cast<unsigned long long>(c.begin + element), static_cast<double>(value));
      return 0;
    }
    std::fprintf(stderr, "damage_checkpoint: no tensor named %s...\n", prefix.c_str());
    return 1;
  }
  if (kind == "state" && argc == 5) {
    std::string key = argv[3];
    const nlohmann::json value = nlohmann::json::parse(argv[4]);
    if (key.rfind("optimizer.", 0) == 0)
      index.state["optimizer"][key.substr(10)] = value;
    else
      index.state["trainer"][key] = value;
    write_all(index_path, index.serialize());
    std::printf("damage_checkpoint: state %s is now %s (index checksum recomputed)\n", key.c_str(),
                value.dump().c_str());
    return 0;
  }
  if (kind == "digit") {
    // "zero_stage": 3 -> 2: a valid index in every field, told apart only by its checksum.
    std::string changed = text;
    const std::size_t at = changed.find("\"zero_stage\": ");
    if (at == std::string::npos) return 1;
    char& d = changed[at + 14];
    d = d == '3' ? '2' : '3';
    write_all(index_path, changed);
    std::printf("damage_checkpoint: one digit of %s changed\n", index_path.c_str());
    return 0;
  }
  if (kind == "no-checksum") {
    write_all(index_path, index.to_json().dump(1));
    std::printf("damage_checkpoint: %s written without its checksum\n", index_path.c_str());
    return 0;
  }
  std::fprintf(stderr, "damage_checkpoint: unknown damage '%s' (or its arguments)\n", kind.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: damage_checkpoint STEP_DIR value|state|digit|no-checksum ...\n");
    return 2;
  }
  try {
    return damage(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "damage_checkpoint: %s\n", e.what());
    return 1;
  }
}
