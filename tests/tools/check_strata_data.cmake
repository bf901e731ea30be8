# strata-data against the tokenizer fixtures (cmake -P, so no other interpreter).
#   -DDATA=<strata-data> -DTOKENIZERS=<tests/data/tokenizers> -DWORK=<dir>
# tokenize: a .jsonl of the reference cases of expected.json (Hugging Face's ids for the GPT-2-style tokenizer),
# repeated, with a blank line, and a .txt, at --threads 1 and --threads 3 with small shards and a val split: the
# shards are identical byte for byte, and their tokens are the reference ids, each document followed by
# <|endoftext|>; inspect shows the counts and decodes a shard; every bad input is refused naming the file and line,
# and a refused run leaves no shard and no temporary behind.
cmake_minimum_required(VERSION 3.24)
foreach(v DATA TOKENIZERS WORK)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "check_strata_data: -D${v}=... is required")
  endif()
endforeach()
set(tok ${TOKENIZERS}/gpt2_tokenizer.json)
set(eot 600)  # <|endoftext|> in gpt2_tokenizer.json
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})

include(${CMAKE_CURRENT_LIST_DIR}/../support/run_checks.cmake)
# run(<out> <expected exit code> <command...>): run_exit with this script's 60 s.
macro(run out rc_want)
  run_exit(${out} ${rc_want} 60 ${ARGN})
endmacro()

# refused(<regex> <args...>): strata-data exits 1 with a message matching regex.
function(refused regex)
  run(text 1 ${DATA} ${ARGN})
  expect_match("${text}" "${regex}" "refusal")
endfunction()

# The hex of `ids` (a list) as little-endian uint16 tokens, as a shard holds them.
function(uint16_hex out)
  set(hex "")
  foreach(id IN LISTS ARGN)
    math(EXPR lo "${id} % 256" OUTPUT_FORMAT HEXADECIMAL)
    math(EXPR hi "${id} / 256" OUTPUT_FORMAT HEXADECIMAL)
    foreach(b lo hi)
      string(SUBSTRING "${${b}}" 2 -1 d)
      string(LENGTH "${d}" n)
      if(n EQUAL 1)
        set(d "0${d}")
      endif()
      string(APPEND hex "${d}")
    endforeach()
  endforeach()
  set(${out} "${hex}" PARENT_SCOPE)
endfunction()

# The tokens of shards, in order, as hex (the 64-byte Strata header skipped).
function(shard_tokens out)
  set(hex "")
  foreach(f IN LISTS ARGN)
    file(READ ${f} body OFFSET 64 HEX)
    string(APPEND hex "${body}")
  endforeach()
  set(${out} "${hex}" PARENT_SCOPE)
endfunction()

# ---- inputs: the reference cases as JSONL lines (each case's whole object: its "text" is the document, the other
# fields are ignored), and their expected tokens ---------------------------------------------------------------------
file(READ ${TOKENIZERS}/expected.json expected)
string(JSON ncases LENGTH "${expected}" cases)
math(EXPR last "${ncases} - 1")
set(lines "")
set(case_hex "")
set(case_docs 0)
foreach(i RANGE ${last})
  string(JSON name GET "${expected}" cases ${i} name)
  string(JSON text_type ERROR_VARIABLE no_text TYPE "${expected}" cases ${i} text)
  if(NOT text_type STREQUAL "STRING" OR name STREQUAL "controls")  # invalid UTF-8 is no JSON string; NUL no CMake one
    continue()
  endif()
  string(JSON case GET "${expected}" cases ${i})
  string(REPLACE "\n" "" case "${case}")  # the writer's layout; newlines in the text are escaped
  string(APPEND lines "${case}\n")
  string(JSON ids GET "${expected}" cases ${i} ids gpt2)
  string(REGEX MATCHALL "[0-9]+" ids "${ids}")
  uint16_hex(hex ${ids} ${eot})
  string(APPEND case_hex "${hex}")
  math(EXPR case_docs "${case_docs} + 1")
endforeach()
# 40 copies, with a blank line (skipped) between the first two: ~1,000 documents, ~30,000 tokens.
set(jsonl "${lines}\n")
set(want_hex "${case_hex}")
foreach(r RANGE 2 40)
  string(APPEND jsonl "${lines}")
  string(APPEND want_hex "${case_hex}")
endforeach()
math(EXPR jsonl_docs "${case_docs} * 40")
file(WRITE ${WORK}/cases.jsonl "${jsonl}")
# The .txt: the "code" case, newlines and all, one document.
string(JSON code_index GET "${expected}" cases 16 name)
if(NOT code_index STREQUAL "code")
  message(FATAL_ERROR "expected.json: case 16 is '${code_index}', not 'code'")
endif()
string(JSON code GET "${expected}" cases 16 text)
string(JSON code_ids GET "${expected}" cases 16 ids gpt2)
string(REGEX MATCHALL "[0-9]+" code_ids "${code_ids}")
uint16_hex(code_hex ${code_ids} ${eot})
file(WRITE ${WORK}/code.txt "${code}")
string(APPEND want_hex "${code_hex}")
math(EXPR docs "${jsonl_docs} + 1")
string(LENGTH "${want_hex}" n)
math(EXPR tokens "${n} / 4")

# ---- tokenize at 1 and 3 threads: the same bytes, the reference tokens -------------------------------------------
# 997 tokens a shard (a prime: documents cross shard boundaries), the first 2,000 tokens' documents to val.
foreach(threads 1 3)
  file(MAKE_DIRECTORY ${WORK}/t${threads})
  run(text 0 ${DATA} tokenize --tokenizer ${tok} --out ${WORK}/t${threads}/d --shard-tokens 997 --val-tokens 2000
      --threads ${threads} ${WORK}/cases.jsonl ${WORK}/code.txt)
  expect_match("${text}" "strata-data tokenize: ${docs} documents, ${tokens} tokens \\(train [0-9]+ in [0-9]+ shard\\(s\\), val [0-9]+ in 3 shard\\(s\\), uint16\\), [0-9.]+ s, [0-9.]+ MB/s, ${threads} thread\\(s\\)"
         "summary at --threads ${threads}")
  file(GLOB shards_${threads} RELATIVE ${WORK}/t${threads} ${WORK}/t${threads}/*)
endforeach()
if(NOT "${shards_1}" STREQUAL "${shards_3}")
  message(FATAL_ERROR "--threads 1 wrote ${shards_1}, --threads 3 wrote ${shards_3}")
endif()
foreach(f IN LISTS shards_1)
  execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${WORK}/t1/${f} ${WORK}/t3/${f} RESULT_VARIABLE differ)
  if(differ)
    message(FATAL_ERROR "${f} differs between --threads 1 and --threads 3")
  endif()
endforeach()
file(GLOB val ${WORK}/t3/d_val_*.bin)
file(GLOB train ${WORK}/t3/d_train_*.bin)
shard_tokens(got_hex ${val} ${train})
if(NOT got_hex STREQUAL want_hex)
  message(FATAL_ERROR "the shards' tokens are not the reference ids each followed by ${eot}")
endif()
# Val holds whole documents: it ends with <|endoftext|> and holds at least 2,000 tokens.
shard_tokens(val_hex ${val})
string(LENGTH "${val_hex}" n)
math(EXPR val_tokens "${n} / 4")
math(EXPR eot_at "${n} - 4")
string(SUBSTRING "${val_hex}" ${eot_at} 4 val_end)
if(val_tokens LESS 2000 OR NOT val_end STREQUAL "5802")
  message(FATAL_ERROR "val: ${val_tokens} tokens ending in ${val_end}: not whole documents of >= 2000 tokens")
endif()

# ---- inspect ------------------------------------------------------------------------------------------------------
run(text 0 ${DATA} inspect ${WORK}/t3/d_train_000000.bin ${WORK}/t3/d_val_000000.bin --tokenizer ${tok})
expect_match("${text}" "d_train_000000.bin +strata +uint16 +997  yes  \\[" "inspect's row")
expect_match("${text}" "# 2 shard\\(s\\), 1994 tokens, every id in the vocabulary of 601" "inspect's verdict")
run(text 0 ${DATA} tokenize --tokenizer ${tok} --out ${WORK}/code ${WORK}/code.txt)
run(text 0 ${DATA} inspect ${WORK}/code_train_000000.bin --tokenizer ${tok} --decode --first 100)
list(LENGTH code_ids n)
math(EXPR n "${n} + 1")
expect_match("${text}" "code_train_000000.bin +strata +uint16 +${n} " "inspect of code.txt")
expect_match("${text}" "text: \"def f\\(x\\):\\\\n    return x" "inspect --decode")
expect_match("${text}" "<\\|endoftext\\|>\"" "inspect --decode")

# ---- refusals -----------------------------------------------------------------------------------------------------
file(WRITE ${WORK}/bad_json.jsonl "{\"text\": \"a\"}\n\n{\"text\": \"b\"\n{\"text\": \"c\"}\n")
file(WRITE ${WORK}/no_field.jsonl "{\"text\": \"a\"}\n{\"body\": \"b\"}\n")
file(WRITE ${WORK}/number.jsonl "{\"text\": 5}\n")
file(WRITE ${WORK}/array.jsonl "[\"text\"]\n")
file(MAKE_DIRECTORY ${WORK}/refused ${WORK}/folder.txt)
set(out --tokenizer ${tok} --out ${WORK}/refused/r)
refused("bad_json\\.jsonl:3: not JSON \\(.*syntax error" tokenize ${out} --threads 3 ${WORK}/cases.jsonl
        ${WORK}/bad_json.jsonl)
refused("no_field\\.jsonl:2: no string field 'text'" tokenize ${out} ${WORK}/no_field.jsonl)
refused("no_field\\.jsonl:1: no string field 'body'" tokenize ${out} --field body ${WORK}/no_field.jsonl)
refused("number\\.jsonl:1: no string field 'text'" tokenize ${out} ${WORK}/number.jsonl)
refused("array\\.jsonl:1: no string field 'text'" tokenize ${out} ${WORK}/array.jsonl)
refused("cannot open input .*missing\\.txt: No such file" tokenize ${out} ${WORK}/code.txt ${WORK}/missing.txt)
refused("input '.*folder\\.txt' is not a regular file but a directory" tokenize ${out} ${WORK}/folder.txt)
refused("input '.*cases\\.csv': not a \\.txt or \\.jsonl file" tokenize ${out} ${WORK}/cases.csv)
refused("--out '.*nowhere/r_train_000000\\.bin': the directory '.*nowhere' does not exist" tokenize --tokenizer ${tok}
        --out ${WORK}/nowhere/r ${WORK}/code.txt)
refused("--out: .*code_train_000000\\.bin already exists.*--force" tokenize --tokenizer ${tok} --out ${WORK}/code
        ${WORK}/code.txt)
run(text 0 ${DATA} tokenize --tokenizer ${tok} --out ${WORK}/code --force ${WORK}/code.txt)
refused("--eot: 601 is not an id of" tokenize ${out} --eot 601 ${WORK}/code.txt)
# A tokenizer with no end-of-text token: the GPT-2 fixture without its added token.
file(READ ${tok} json)
string(JSON json SET "${json}" added_tokens "[]")
file(WRITE ${WORK}/no_eot_tokenizer.json "${json}")
refused("no_eot_tokenizer\\.json names no end-of-text token .*give its id with --eot" tokenize --tokenizer
        ${WORK}/no_eot_tokenizer.json --out ${WORK}/refused/r ${WORK}/code.txt)
run(text 0 ${DATA} tokenize --tokenizer ${WORK}/no_eot_tokenizer.json --eot 0 --out ${WORK}/refused/eot0
    ${WORK}/code.txt)
file(REMOVE ${WORK}/refused/eot0_train_000000.bin)
# The refused runs left nothing: no shard, no temporary.
file(GLOB left ${WORK}/refused/*)
if(left)
  message(FATAL_ERROR "refused runs left ${left}")
endif()
