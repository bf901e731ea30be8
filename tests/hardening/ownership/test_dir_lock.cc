// DirLock (core/dir_lock.h): a directory held by a live process is refused naming it (host, pid, start time); a lock
// a dead process left, or one whose pid the system has given to another process, is taken over with a warning; a
// holder on another host is refused with how to remove its lock; one process's locks on one directory are shared.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "core/dir_lock.h"
#include "core/error.h"
#include "tests/support/test_support.h"

namespace strata {
namespace {

std::string text_of(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

void expect_says(const std::string& message, const std::string& part) {
  EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' in: " << message;
}

// A record as DirLock writes it, of `holder`.
void write_record(const std::string& dir, const LockHolder& h) {
  std::ofstream(dir + "/.lock") << nlohmann::json{
      {"host", h.host},
      {"pid", h.pid},
      {"start_ticks", h.start_ticks},
      {"started", h.started},
      {"program", h.program}}.dump();
}

// Runs `command` in a shell (system(3): the child execs at once, so nothing of this multi-threaded process runs in
// it) and returns its exit status.
int shell(const std::string& command) {
  const int rc = std::system(command.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

// A holder in another process: scripts/strata_files.py's DirLock (the same record and flock as the C++ one), in the
// background until `dir`/release appears. Returns once it holds the lock.
void hold_in_python(const std::string& dir) {
  const std::string program = "import os, sys, time; sys.path.insert(0, '" STRATA_SOURCE_DIR
                              "/scripts'); from strata_files import DirLock; "
                              "lock = DirLock('" +
                              dir + "', 'x', 'holder'); open('" + dir +
                              "/held', 'w').close(); "
                              "[time.sleep(0.05) for _ in range(1200) if not os.path.exists('" +
                              dir + "/release')]; lock.release()";
  ASSERT_EQ(shell("python3 -c \"" + program + "\" > " + dir + "/holder.log 2>&1 &"), 0);
  for (int i = 0; i < 300 && shell("test -e " + dir + "/held") != 0; ++i) shell("sleep 0.05");
  ASSERT_EQ(shell("test -e " + dir + "/held"), 0) << "the holder did not start";
}

void release_python(const std::string& dir) {
  shell("touch " + dir + "/release");
  // flock(1) waits for the holder's lock to go: the holder has ended.
  EXPECT_EQ(shell("flock -w 30 " + dir + "/.lock true"), 0);
}

TEST(DirLock, ALiveHolderIsRefusedNamingIt) {
  test::ScratchDir dir("dir_lock_live");
  hold_in_python(dir.path());
  const std::string record = text_of(dir.path() + "/.lock");
  expect_says(record, "\"program\": \"holder\"");
  try {
    DirLock lock = DirLock::acquire(dir.path(), "--checkpoint-dir", "train_gpt");
    ADD_FAILURE() << "a directory a live process holds was taken";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kIo);
    expect_says(e.what(), "--checkpoint-dir '" + dir.path() + "' is in use by another job: holder (pid ");
    expect_says(e.what(), ", started 20");
  }
  EXPECT_EQ(text_of(dir.path() + "/.lock"), record) << "the refused acquire left the holder's record alone";
  release_python(dir.path());
  // This process holds it now; its own second lock shares it; a lock held here is held against flock(1) too.
  DirLock lock = DirLock::acquire(dir.path(), "--checkpoint-dir", "train_gpt");
  EXPECT_TRUE(lock.takeover().empty()) << "the holder emptied its record when it ended: " << lock.takeover();
  expect_says(text_of(dir.path() + "/.lock"), "\"pid\":" + std::to_string(::getpid()));
  expect_says(text_of(dir.path() + "/.lock"), "\"program\":\"train_gpt\"");
  DirLock again = DirLock::acquire(dir.path(), "--checkpoint-dir", "train_gpt");
  EXPECT_TRUE(again.held());
  EXPECT_NE(shell("flock -n " + dir.path() + "/.lock true"), 0) << "the lock is not held";
  lock.release();
  EXPECT_NE(shell("flock -n " + dir.path() + "/.lock true"), 0) << "released while another DirLock shares it";
  again.release();
  EXPECT_EQ(text_of(dir.path() + "/.lock"), "") << "a released lock holds no record";
  EXPECT_EQ(shell("flock -n " + dir.path() + "/.lock true"), 0);
}

TEST(DirLock, ADeadHoldersLockIsTakenOverWithAWarning) {
  test::ScratchDir dir("dir_lock_dead");
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);  // gone: its pid names no process (until the system reuses it)
  LockHolder dead = this_process("train_gpt");
  dead.pid = child;
  write_record(dir.path(), dead);
  DirLock lock = DirLock::acquire(dir.path(), "--checkpoint-dir", "train_gpt");
  expect_says(lock.takeover(), "took over the lock ");
  expect_says(lock.takeover(), "of a job that is gone: train_gpt (pid " + std::to_string(child));
  expect_says(text_of(dir.path() + "/.lock"), "\"pid\":" + std::to_string(::getpid()));
}

TEST(DirLock, ARecycledPidIsNotTakenForTheHolder) {
  test::ScratchDir dir("dir_lock_recycled");
  LockHolder old = this_process("train_gpt");  // this pid, alive, but another start time: another process's pid
  old.start_ticks += 12345;
  write_record(dir.path(), old);
  DirLock lock = DirLock::acquire(dir.path(), "--checkpoint-dir", "train_gpt");
  expect_says(lock.takeover(), "of a job that is gone");
}

// A record of a live process that does not hold the flock (a copy of a directory in use, or a holder exiting, whose pid
// lingers until it is reaped): on this host the free lock is the truth, so it is taken over, saying so.
TEST(DirLock, ALiveProcessThatNoLongerHoldsTheLockIsTakenOver) {
  test::ScratchDir dir("dir_lock_copy");
  write_record(dir.path(), this_process("train_gpt"));
  DirLock lock = DirLock::acquire(dir.path(), "--checkpoint-dir", "train_gpt");
  expect_says(lock.takeover(), "of a job that no longer holds it (exiting, or this directory is a copy of one in use)");
}

TEST(DirLock, AHolderOnAnotherHostIsRefusedWithHowToRemoveIt) {
  test::ScratchDir dir("dir_lock_host");
  LockHolder remote = this_process("train_gpt");
  remote.host = "elsewhere.invalid";
  write_record(dir.path(), remote);
  try {
    DirLock lock = DirLock::acquire(dir.path(), "--checkpoint-dir", "train_gpt");
    ADD_FAILURE() << "a lock of another host was taken";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kIo);
    expect_says(e.what(), "is locked by train_gpt (pid " + std::to_string(::getpid()) + " on host elsewhere.invalid");
    expect_says(e.what(),
                "on another host: from here it cannot be told whether that job still runs. If it does not, "
                "remove " +
                    dir.path());
  }
  EXPECT_NE(text_of(dir.path() + "/.lock").find("elsewhere.invalid"), std::string::npos) << "the record is untouched";
}

}  // namespace
}  // namespace strata
