// Hugging Face model directories, beside <strata/strata.h>: link strata::hf. A directory's config.json of GPT-2 or the
// Llama family (Llama, Mistral, Qwen2) read into its family, shape and exact parameter count (read_hf_config), and a
// directory written as transformers' save_pretrained lays it out (write_hf_directory: config.json, sharded
// safetensors and their index, through temporary names). Its tensors, one file or shards through the index, are read
// by <strata/strata.h>'s SafetensorsReader.
#pragma once

#include "models/hf/hf_config.h"
#include "models/hf/hf_directory_writer.h"
#include "models/llama/llama_config.h"
