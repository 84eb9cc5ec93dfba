/*
 * hf.h - a Hugging Face model folder (what `save_pretrained` writes) read as a GGUF file:
 * the metadata keys and tensor names llama.cpp's convert_hf_to_gguf.py writes, so that
 * everything above the IO layer (the model loader, the tokenizer, `info`, `quantize`)
 * reads a folder exactly as it reads the GGUF the converter would have made.
 *
 * A folder holds:
 *   config.json                       architectures[0], the hyperparameters
 *   model.safetensors                 the tensors, or shards listed by
 *   model.safetensors.index.json      {"weight_map": {tensor: shard file}}
 *   tokenizer.json                    BPE vocabulary, merges, pre-tokenizer, added tokens
 *   tokenizer_config.json             chat_template, bos/eos tokens, add_bos_token
 *   chat_template.jinja               the chat template, where transformers 5 saves it
 *
 * What is converted, as the converter does it:
 *   - config.json -> {arch}.* keys (hf.c's table: LlamaForCausalLM -> llama, Qwen2ForCausalLM
 *     -> qwen2, Qwen3ForCausalLM -> qwen3, Gemma3ForCausalLM -> gemma3); RoPE scaling
 *     linear -> rope.scaling.*, llama3 -> a rope_freqs.weight tensor of the same factors;
 *   - tensor names model.layers.N.self_attn.q_proj.weight -> blk.N.attn_q.weight, ...; the
 *     shapes reversed (GGUF lists the contiguous dimension first);
 *   - llama's Q and K rows permuted from Hugging Face's RoPE pairing (i, i + d/2) to the
 *     interleaved one (2i, 2i + 1) that llama GGUF files use;
 *   - Gemma-3's norm weights, stored as w - 1, plus 1;
 *   - every 1-D tensor in F32; matrices stay F32, F16 or BF16 (views into the mapping
 *     where nothing changes them);
 *   - the tokenizer as tokenizer.ggml.* keys: tokens by id (padded with [PAD<id>] to the
 *     model's vocab_size), token types (added tokens control or user-defined), merges,
 *     the pre-tokenizer recognised from its split regex (gpt-2, llama-bpe, qwen2), special
 *     token ids, add_bos_token / add_eos_token (tokenizer.json's post_processor first),
 *     the chat template.
 * Anything that would change the numbers and is not handled (an unknown architecture,
 * tensor, dtype, RoPE scaling, pre-tokenizer or normalizer) is refused with a message
 * naming the file and the field; nothing is silently dropped.
 */
#ifndef ER_IO_HF_H
#define ER_IO_HF_H

#include "edgerunner.h"
#include "io/gguf.h"

enum hf_open_flags {
    HF_TOKENIZER_ONLY = 1u << 0, /* only the tokenizer files (and config.json if present) */
};

/* Reads folder `dir` into a gguf_file built in memory (gguf_close frees it and what it
 * owns, unmapping the SafeTensors files). */
er_status hf_open(const char *dir, unsigned flags, gguf_file **out);

/* A GGUF file, or a folder through hf_open: what every command's -m accepts. */
er_status hf_open_any(const char *path, unsigned flags, gguf_file **out);

#endif
