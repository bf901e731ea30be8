// JsonSchema (core/json_schema.h): types, ranges (no integer read modulo 2^32), required and unknown keys, every
// error naming the document and the JSON path; parse_json's bounded, library-free messages; read_json_file through
// the checked input path (a FIFO refused at once, a size bound).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <string>

#include "core/json_schema.h"
#include "tests/support/test_support.h"

namespace strata {
namespace {

using S = JsonSchema;
using nlohmann::json;

// The message `schema` gives `text` ("" when it passes).
std::string problem(const S& schema, const std::string& text) {
  try {
    schema.check(json::parse(text), "c.json");
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    return e.what();
  }
  return "";
}

void expect_says(const std::string& message, const std::string& part) {
  EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' in: " << message;
}

const S& links() {
  static const S s =
      S::object({required("name", S::string()), optional("count", S::integer(1, 1 << 20)),
                 required("links", S::array(S::object({required("bandwidth_gbs", S::number(0, 1e6, true)),
                                                       optional("latency_us", S::number(0, 1e6))}))),
                 optional("tags", S::map(S::one_of({"a", "b"})))});
  return s;
}

TEST(JsonSchema, NamesTheFileAndThePathOfTheFirstBadValue) {
  EXPECT_EQ(problem(links(), R"({"name": "x", "links": [{"bandwidth_gbs": 1}]})"), "");
  expect_says(problem(links(), R"({"name": "x", "links": [{"bandwidth_gbs": 1}, {"bandwidth_gbs": 2},
                                  {"bandwidth_gbs": "x"}]})"),
              "c.json: .links[2].bandwidth_gbs: expected a number, got a string \"x\"");
  expect_says(problem(links(), R"({"name": 3, "links": []})"), "c.json: .name: expected a string, got an integer 3");
  expect_says(problem(links(), R"({"links": []})"), "c.json: .name: missing (a required field)");
  expect_says(problem(links(), R"({"name": "x", "links": [], "link": []})"),
              "c.json: .link: unknown key (known here: name, count, links, tags)");
  expect_says(problem(links(), R"({"name": "x", "links": [{"bandwidth_gbs": 0}]})"),
              ".links[0].bandwidth_gbs: expected a number in (0, 1000000], got 0");
  expect_says(problem(links(), R"({"name": "x", "links": [], "tags": {"odd key/1": "c"}})"),
              R"(.tags["odd key/1"]: expected one of "a", "b", got a string "c")");
  expect_says(problem(links(), "[1]"), "c.json: (the top level): expected an object, got an array [1]");
}

TEST(JsonSchema, IntegersAreRangeCheckedNeverWrapped) {
  const S s = S::object({required("n", S::integer(1, 1 << 20))});
  EXPECT_EQ(problem(s, R"({"n": 8})"), "");
  EXPECT_EQ(problem(s, R"({"n": 8e0})"), "") << "a whole number written with an exponent is an integer";
  expect_says(problem(s, R"({"n": 4294967304})"), ".n: expected an integer in [1, 2^20], got 4294967304");
  expect_says(problem(s, R"({"n": 18446744073709551616})"), ".n: expected an integer in [1, 2^20]");
  expect_says(problem(s, R"({"n": -1})"), ".n: expected an integer in [1, 2^20], got -1");
  expect_says(problem(s, R"({"n": 2.5})"), ".n: expected an integer in [1, 2^20], got 2.5");
  expect_says(problem(s, R"({"n": true})"), ".n: expected an integer, got a boolean true");
  const S u = S::object({required("n", S::integer(0, UINT64_MAX))});
  EXPECT_EQ(problem(u, R"({"n": 18446744073709551615})"), "");
}

TEST(JsonSchema, ReportsUnknownKeysWhereAFormatAllowsThem) {
  const S s = S::object({required("a", S::integer(0, 9))}, S::Unknown::kReport);
  const std::vector<std::string> unknown = s.check(json::parse(R"({"a": 1, "b": 2, "c": {"d": 1}})"), "x");
  EXPECT_EQ(unknown, (std::vector<std::string>{".b", ".c"}));
  const S free = S::object({}, S::Unknown::kAllow);
  EXPECT_TRUE(free.check(json::parse(R"({"z": 1})"), "x").empty());
  EXPECT_EQ(problem(S::object({required("a", S::integer(0, 9).or_null())}), R"({"a": null})"), "");
}

TEST(JsonSchema, ParseErrorsAreOneLineNamingTheFile) {
  const auto message = [](const std::string& text) {
    try {
      parse_json(text, "cluster file c.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const std::string m = message("{\"a\": ");
  expect_says(m, "cluster file c.json: not valid JSON: ");
  EXPECT_EQ(m.find("[json.exception"), std::string::npos) << m;
  expect_says(message(std::string(100, '[') + std::string(100, ']')), "nested deeper than 64 levels");
}

TEST(JsonSchema, FilesAreReadThroughTheCheckedPath) {
  test::ScratchDir dir("json_schema");
  const std::string fifo = dir.path() + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  try {
    read_json_file(fifo, "cluster file", 1 << 20);
    ADD_FAILURE() << "a FIFO was read";
  } catch (const Error& e) {
    expect_says(e.what(), "is not a regular file but a FIFO");
  }
  const std::string big = dir.path() + "/big.json";
  std::ofstream(big) << "[" << std::string(5000, ' ') << "]";
  try {
    read_json_file(big, "cluster file", 4096);
    ADD_FAILURE() << "a file over the bound was read";
  } catch (const Error& e) {
    expect_says(e.what(), "has 5002 bytes, more than the 4096");
  }
}

}  // namespace
}  // namespace strata
