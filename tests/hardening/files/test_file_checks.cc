// Files: input types refused without blocking, output paths checked before any work, loud writes, writer-unique
// temporaries (core/file_checks.h, core/output_file.h, the GPT's AtomicFile, the checkpoint's small files).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "core/file_checks.h"
#include "core/output_file.h"
#include "core/atomic_file.h"
#include "runtime/checkpoint/chunk_file.h"
#include "tests/support/test_support.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using test::ScratchDir;

// The message of the strata::Error `fn` throws, after checking its code.
template <typename Fn>
std::string message_of(Fn&& fn, ErrorCode code) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "expected a strata::Error";
  return {};
}

void expect_says(const std::string& message, std::initializer_list<std::string> parts) {
  for (const std::string& p : parts) EXPECT_NE(message.find(p), std::string::npos) << "'" << p << "' in: " << message;
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::set<std::string> temporaries_of(const std::string& path) {
  std::set<std::string> out;
  const std::string prefix = fs::path(path).filename().string() + ".tmp";
  for (const auto& e : fs::directory_iterator(fs::path(path).parent_path()))
    if (e.path().filename().string().rfind(prefix, 0) == 0) out.insert(e.path().string());
  return out;
}

// Two writers of one path in one process each write their own temporary; the last commit wins whole.
TEST(FileWriters, TwoWritersOfOnePathGetDistinctTemporaries) {
  ScratchDir dir("files_writers");
  const std::string path = dir.file("weights.bin");
  {
    AtomicFile a(path);
    AtomicFile b(path);
    EXPECT_NE(a.tmp_path(), b.tmp_path());
    EXPECT_EQ(temporaries_of(path).size(), 2u);
    const std::string text_a(100000, 'a'), text_b(70000, 'b');
    a.write(text_a.data(), text_a.size());
    b.write(text_b.data(), text_b.size());
    a.write(text_a.data(), text_a.size());
    a.commit();
    EXPECT_EQ(read_all(path), text_a + text_a) << "a's file, whole: b's writes went to b's own temporary";
    b.commit();
    EXPECT_EQ(read_all(path), text_b);
  }
  EXPECT_TRUE(temporaries_of(path).empty());
  // A writer that never commits removes its temporary and leaves the file as it was.
  {
    AtomicFile c(path);
    c.write("zz", 2);
  }
  EXPECT_EQ(read_all(path), std::string(70000, 'b'));
  EXPECT_TRUE(temporaries_of(path).empty());
  // Names for temporaries: one per call, and one per named writer (a job's ranks share theirs).
  EXPECT_NE(unique_tmp_path(path), unique_tmp_path(path));
  EXPECT_EQ(tmp_path_for(path, "host.1"), path + ".tmp.host.1");
  EXPECT_NE(tmp_path_for(path, "host.1"), tmp_path_for(path, "host.2"));
  // The checkpoint's small files too: a leftover of another writer is neither used nor disturbed.
  const std::string latest = dir.file("latest");
  std::ofstream(latest + ".tmp") << "step-0000";
  write_file_atomically(latest, "step-00000010\n");
  EXPECT_EQ(read_text_file(latest), "step-00000010\n");
  EXPECT_EQ(read_all(latest + ".tmp"), "step-0000");
}

// A FIFO, a directory or a device as an input is refused at once, naming the flag, the path and the type.
TEST(FileInputs, NonRegularInputsAreRefusedWithoutBlocking) {
  ScratchDir dir("files_inputs");
  const std::string fifo = dir.file("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // With no writer, a blocking open would never return: this test would hang (ctest's TIMEOUT) instead of failing.
  expect_says(message_of([&] { check_input_file(fifo, "--data"); }, ErrorCode::kIo),
              {"--data", fifo, "is not a regular file but a FIFO"});
  expect_says(message_of([&] { read_input_file(fifo, "--text"); }, ErrorCode::kIo), {"--text", "FIFO"});
  expect_says(message_of([&] { read_text_file(fifo); }, ErrorCode::kIo), {fifo, "FIFO"});
  expect_says(message_of([&] { check_input_file(dir.path(), "--init"); }, ErrorCode::kIo),
              {"--init", "is not a regular file but a directory"});
  expect_says(message_of([&] { check_input_file("/dev/zero", "IN"); }, ErrorCode::kIo),
              {"IN '/dev/zero' is not a regular file but a character device"});
  expect_says(message_of([&] { check_input_file(dir.file("absent"), "--data"); }, ErrorCode::kIo),
              {"cannot open --data", "No such file or directory"});
  const std::string file = dir.file("tokens.bin");
  std::ofstream(file) << "abcd";
  EXPECT_EQ(read_input_file(file, "--data"), "abcd");
  const int fd = open_input_file(file, "--data");
  EXPECT_GE(fd, 0);
  char c = 0;
  EXPECT_EQ(::read(fd, &c, 1), 1);  // an ordinary blocking descriptor again
  ::close(fd);
}

// Output paths: what is refused before any work, and what is accepted (a device written in place, a missing file in a
// writable directory).
TEST(FileOutputs, PathsAreCheckedBeforeTheWork) {
  ScratchDir dir("files_outputs");
  const std::string missing = dir.file("missing");
  expect_says(message_of([&] { check_output_file(missing + "/w.safetensors", "--save", OutputKind::kReplaced); },
                         ErrorCode::kIo),
              {"--save", missing + "/w.safetensors", "the directory '" + missing + "' does not exist"});
  const std::string file = dir.file("afile");
  std::ofstream(file) << "x";
  expect_says(message_of([&] { check_output_file(file + "/m.jsonl", "--metrics", OutputKind::kDirect); },
                         ErrorCode::kIo),
              {"--metrics", "is a regular file, not a directory"});
  expect_says(message_of([&] { check_output_file(dir.path(), "--save", OutputKind::kReplaced); }, ErrorCode::kIo),
              {"--save", "is a directory"});
  expect_says(message_of([&] { check_output_file("/dev/null", "--save", OutputKind::kReplaced); }, ErrorCode::kIo),
              {"--save '/dev/null' is a character device", "renamed over it"});
  const std::string fifo = dir.file("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expect_says(message_of([&] { check_output_file(fifo, "--metrics", OutputKind::kDirect); }, ErrorCode::kIo),
              {"--metrics", "FIFO with no reader"});
  expect_says(message_of([&] { OutputFile(fifo, "--metrics"); }, ErrorCode::kIo), {"--metrics", "FIFO with no reader"});
  check_output_file("/dev/full", "--metrics", OutputKind::kDirect);  // accepted: its failure shows on the write
  check_output_file(dir.file("new.json"), "--trace", OutputKind::kDirect);
  check_output_file(file, "--save", OutputKind::kReplaced);
  check_output_file("relative_name_in_cwd.json", "--metrics", OutputKind::kDirect);
  EXPECT_FALSE(fs::exists(dir.file("new.json"))) << "a check creates nothing";
  // A checkpoint directory is created up front; under a file it cannot be.
  prepare_output_dir(dir.file("a/b/ckpt"), "--checkpoint-dir");
  EXPECT_TRUE(fs::is_directory(dir.file("a/b/ckpt")));
  expect_says(message_of([&] { prepare_output_dir(file + "/ckpt", "--checkpoint-dir"); }, ErrorCode::kIo),
              {"--checkpoint-dir", file + "/ckpt", "cannot create the directory"});
}

// Every write is checked: a full disk is an error naming the file and the system's reason.
TEST(FileOutputs, WritesFailLoudly) {
  OutputFile full("/dev/full", "--metrics");
  expect_says(message_of([&] { full.write("{\"step\": 0}\n"); }, ErrorCode::kIo),
              {"--metrics '/dev/full'", "No space left on device"});
  expect_says(message_of([&] { write_output_file("/dev/full", "the trace file", "{}"); }, ErrorCode::kIo),
              {"the trace file '/dev/full'", "No space left on device"});
  ScratchDir dir("files_writes");
  OutputFile ok(dir.file("m.jsonl"), "--metrics");
  ok.write("a\n");
  ok.write("b\n");
  ok.close();
  EXPECT_EQ(read_all(dir.file("m.jsonl")), "a\nb\n");
  expect_says(message_of([&] { OutputFile(dir.file("no/dir/m.jsonl"), "--metrics"); }, ErrorCode::kIo),
              {"cannot create --metrics", "No such file or directory"});
}

// A resumed run appends to its --metrics (the records before the restart stay); a new run starts the file again.
TEST(FileOutputs, AppendKeepsWhatTheFileHolds) {
  ScratchDir dir("files_append");
  write_output_file(dir.file("m.jsonl"), "--metrics", "a\n");
  OutputFile more(dir.file("m.jsonl"), "--metrics", OutputFile::Mode::kAppend);
  more.write("b\n");
  more.close();
  EXPECT_EQ(read_all(dir.file("m.jsonl")), "a\nb\n");
  OutputFile fresh(dir.file("new.jsonl"), "--metrics", OutputFile::Mode::kAppend);  // created where missing
  fresh.write("c\n");
  fresh.close();
  EXPECT_EQ(read_all(dir.file("new.jsonl")), "c\n");
  write_output_file(dir.file("m.jsonl"), "--metrics", "d\n");
  EXPECT_EQ(read_all(dir.file("m.jsonl")), "d\n");
}

}  // namespace
}  // namespace strata
