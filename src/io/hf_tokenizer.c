/*
 * hf_tokenizer.c - tokenizer.json + tokenizer_config.json -> the tokenizer.ggml.* keys
 * llama.cpp's converter writes for a byte-level BPE vocabulary (see hf.h and
 * tokenizer/vocab.h for what the keys mean):
 *
 *   tokens       model.vocab and added_tokens by id; ids without a token, and the rows of
 *                config.json's vocab_size beyond the last token, become "[PAD<id>]" (UNUSED)
 *   token_type   NORMAL; an added token CONTROL when special or when it looks special
 *                (<|...|>, as the converter's does_token_look_special), else USER_DEFINED
 *   merges       "left right" by rank (a merge stored as a [left, right] pair is joined)
 *   pre          recognised from the pre-tokenizer: ByteLevel with its own regex (gpt-2),
 *                or a Split on Llama-3's regex (llama-bpe) or Qwen2's (qwen2) before a
 *                ByteLevel without one; the normalizer must be what that kind implies
 *                (none; NFC for qwen2), and model.ignore_merges too (Llama-3's only)
 *   special ids  bos/eos/unk/pad/mask from tokenizer_config.json, else config.json's ids
 *   add_bos_token, add_eos_token   from tokenizer.json's post_processor (a template that
 *                begins with BOS, ends with EOS; ByteLevel: neither), else from
 *                tokenizer_config.json when it has them, else not written
 *   chat_template   from tokenizer_config.json, else chat_template.jinja (as transformers 5
 *                saves it), else chat_template.json
 *
 * A SentencePiece vocabulary saved as BPE (Gemma's tokenizer.json: a normalizer that only
 * replaces ' ' with U+2581, no pre-tokenizer or transformers 5's Split on ' ', which never
 * splits after that normalizer, byte_fallback) becomes the `llama` model
 * the engine's SentencePiece tokenizer runs (tokenizer/spm.c), as llama.cpp's converter
 * writes it from tokenizer.model: the same tokens; types BYTE for <0xNN>, UNKNOWN for
 * model.unk_token, CONTROL / USER_DEFINED for the added tokens as above (a user-defined
 * token's U+2581 back to ' ', as the converter pre-normalizes them); add_space_prefix
 * false. tokenizer.json keeps no scores, only the merges in the order the scores gave
 * them: a token's score is minus the rank of the first merge that forms it, so that
 * SentencePiece's "merge the pair whose token scores highest" is BPE's "apply the merge
 * of lowest rank" (tokens no merge forms: lower than all; tokens/test_hf.py checks the
 * ids against HF tokenizers).
 *
 * Any other model type, pre-tokenizer or normalizer is refused by name: its tokens would
 * differ from the reference tokenizer's, silently.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "io/hf_build.h"

enum {
    MAX_TOKEN_ID = 1 << 24,
    TYPE_NORMAL = 1,
    TYPE_UNKNOWN = 2,
    TYPE_CONTROL = 3,
    TYPE_USER_DEFINED = 4,
    TYPE_UNUSED = 5,
    TYPE_BYTE = 6
};

static const char SPM_SPACE[] = "\xe2\x96\x81"; /* U+2581, SentencePiece's escaped space */

/* The split regexes whose pre-tokenizers src/tokenizer/pretok.c implements, as they stand
 * in tokenizer.json (decoded), with llama.cpp's name for each. */
static const struct {
    const char *regex, *pre;
} known_splits[] = {
    {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
     "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
     "llama-bpe"},
    {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
     "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
     "qwen2"},
    {"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+", "gpt-2"},
};

typedef struct tok_reader {
    hf_build *b;
    const json_doc *doc; /* tokenizer.json */
    char path[4096];     /* DIR/tokenizer.json */
} tok_reader;

/* llama.cpp's pre-tokenizer name for tokenizer.json's pre_tokenizer and normalizer. */
static er_status recognise_pre(const tok_reader *r, const json_node *root, const char **pre) {
    const json_doc *d = r->doc;
    const json_node *p = json_doc_get(d, root, "pre_tokenizer"), *norm = json_doc_get(d, root, "normalizer");
    const json_node *model = json_doc_get(d, root, "model");
    *pre = NULL;
    if (json_doc_is(d, json_doc_get(d, p, "type"), "ByteLevel")) {
        const json_node *use_regex = json_doc_get(d, p, "use_regex");
        if (!use_regex || (use_regex->kind == JSON_BOOL && use_regex->i))
            *pre = "gpt-2";
    } else if (json_doc_is(d, json_doc_get(d, p, "type"), "Sequence")) {
        const json_node *list = json_doc_get(d, p, "pretokenizers");
        const json_node *split = json_doc_first(d, list), *bytes = split ? json_doc_next(d, split) : NULL;
        const json_node *regex = json_doc_get(d, json_doc_get(d, split, "pattern"), "Regex");
        const json_node *use_regex = json_doc_get(d, bytes, "use_regex");
        if (list && list->len == 2 && json_doc_is(d, json_doc_get(d, split, "type"), "Split") &&
            json_doc_is(d, json_doc_get(d, split, "behavior"), "Isolated") &&
            json_doc_is(d, json_doc_get(d, bytes, "type"), "ByteLevel") && use_regex &&
            use_regex->kind == JSON_BOOL && !use_regex->i)
            for (size_t i = 0; i < sizeof known_splits / sizeof known_splits[0]; i++)
                if (json_doc_is(d, regex, known_splits[i].regex))
                    *pre = known_splits[i].pre;
        if (!*pre && regex)
            return er_fail(ER_ERR_UNSUPPORTED, "%s: pre-tokenizer split regex '%.120s' is not one of GPT-2's, "
                           "Llama-3's or Qwen2's", r->path, json_doc_str(d, regex));
    }
    if (!*pre)
        return er_fail(ER_ERR_UNSUPPORTED, "%s: pre_tokenizer of type '%.40s' is not supported (byte-level BPE: "
                       "ByteLevel, or a Split on the GPT-2, Llama-3 or Qwen2 regex then ByteLevel)", r->path,
                       p && p->kind == JSON_OBJECT ? json_doc_str(d, json_doc_get(d, p, "type")) : "none");
    const int qwen2 = !strcmp(*pre, "qwen2");
    const int nfc = json_doc_is(d, json_doc_get(d, norm, "type"), "NFC");
    if ((norm && norm->kind != JSON_NULL && !nfc) || nfc != qwen2)
        return er_fail(ER_ERR_UNSUPPORTED, "%s: normalizer '%.40s' with the %s pre-tokenizer is not supported (%s)",
                       r->path, nfc ? "NFC" : json_doc_str(d, json_doc_get(d, norm, "type")), *pre,
                       qwen2 ? "qwen2 needs NFC" : "none expected");
    const json_node *ignore = json_doc_get(d, model, "ignore_merges");
    const int ignores = ignore && ignore->kind == JSON_BOOL && ignore->i;
    if (ignores != !strcmp(*pre, "llama-bpe"))
        return er_fail(ER_ERR_UNSUPPORTED, "%s: model.ignore_merges %s with the %s pre-tokenizer is not supported",
                       r->path, ignores ? "true" : "false", *pre);
    return ER_OK;
}

/* Whether tokenizer.json is a SentencePiece vocabulary saved as BPE (see the header): 1,
 * 0 when it is not one (byte_fallback off), or an error when it is one we cannot run. */
static er_status recognise_spm(const tok_reader *r, const json_node *root, int *spm) {
    const json_doc *d = r->doc;
    const json_node *fallback = json_doc_get(d, json_doc_get(d, root, "model"), "byte_fallback");
    const json_node *norm = json_doc_get(d, root, "normalizer"), *pre = json_doc_get(d, root, "pre_tokenizer");
    *spm = fallback && fallback->kind == JSON_BOOL && fallback->i;
    if (!*spm)
        return ER_OK;
    if (!json_doc_is(d, json_doc_get(d, norm, "type"), "Replace") ||
        !json_doc_is(d, json_doc_get(d, json_doc_get(d, norm, "pattern"), "String"), " ") ||
        !json_doc_is(d, json_doc_get(d, norm, "content"), SPM_SPACE))
        return er_fail(ER_ERR_UNSUPPORTED, "%s: a byte_fallback BPE with normalizer '%.40s' is not supported (Gemma's: "
                       "Replace ' ' with U+2581)", r->path, norm && norm->kind == JSON_OBJECT ?
                       json_doc_str(d, json_doc_get(d, norm, "type")) : "none");
    /* transformers 5's GemmaTokenizer adds a Split on ' ': it runs after the normalizer has
     * replaced every ' ', so it never splits (an inverted one would drop the text) */
    const json_node *invert = json_doc_get(d, pre, "invert");
    const int noop_split = json_doc_is(d, json_doc_get(d, pre, "type"), "Split") &&
                           json_doc_is(d, json_doc_get(d, json_doc_get(d, pre, "pattern"), "String"), " ") &&
                           (!invert || (invert->kind == JSON_BOOL && !invert->i));
    if (pre && pre->kind != JSON_NULL && !noop_split)
        return er_fail(ER_ERR_UNSUPPORTED, "%s: a byte_fallback BPE with pre_tokenizer '%.40s' is not supported (Gemma's "
                       "has none, or a Split on ' ')", r->path,
                       pre->kind == JSON_OBJECT ? json_doc_str(d, json_doc_get(d, pre, "type")) : "?");
    return ER_OK;
}

/* convert_hf_to_gguf.py's does_token_look_special, for the byte-level vocabularies */
static int looks_special(const char *s) {
    const size_t n = strlen(s);
    return !strcmp(s, "<pad>") || !strcmp(s, "<mask>") || (n >= 4 && !strncmp(s, "<|", 2) && !strcmp(s + n - 2, "|>")) ||
           (n >= 8 && !strncmp(s, "<unused", 7) && s[n - 1] == '>');
}

/* The id of the token whose text is s, or -1. */
static int64_t find_token(const gguf_string *tokens, int64_t n, const char *s) {
    const size_t len = strlen(s);
    for (int64_t id = 0; id < n; id++)
        if (tokens[id].data && tokens[id].len == len && !memcmp(tokens[id].data, s, len))
            return id;
    return -1;
}

/* A token named in tokenizer_config.json: a string, or an object with "content". */
static const char *config_token(const json_doc *cfg, const char *key) {
    const json_node *n = json_doc_get(cfg, json_doc_root(cfg), key);
    if (n && n->kind == JSON_OBJECT)
        n = json_doc_get(cfg, n, "content");
    return n && n->kind == JSON_STRING ? json_doc_str(cfg, n) : NULL;
}

/* tokens (n_tokens) and their types from model.vocab and added_tokens. */
static er_status read_tokens(tok_reader *r, const json_node *root, gguf_string **tokens_out, int32_t **types_out,
                             int64_t *n_out) {
    const json_doc *d = r->doc;
    hf_build *b = r->b;
    const json_node *vocab = json_doc_get(d, json_doc_get(d, root, "model"), "vocab");
    const json_node *added = json_doc_get(d, root, "added_tokens");
    er_status st;
    if (!vocab || vocab->kind != JSON_OBJECT)
        return er_fail(ER_ERR_FORMAT, "%s: missing object 'model.vocab'", r->path);
    if (added && added->kind != JSON_ARRAY)
        return er_fail(ER_ERR_FORMAT, "%s: 'added_tokens' is not an array", r->path);
    int64_t n = b->n_vocab;
    for (const json_node *e = json_doc_first(d, vocab); e; e = json_doc_next(d, e)) {
        if (e->kind != JSON_INT || e->i < 0 || e->i >= MAX_TOKEN_ID)
            return er_fail(ER_ERR_FORMAT, "%s: model.vocab['%.100s'] is not a token id in [0, %d)", r->path,
                           json_doc_key(d, e), MAX_TOKEN_ID);
        n = e->i + 1 > n ? e->i + 1 : n;
    }
    for (const json_node *e = json_doc_first(d, added); e; e = json_doc_next(d, e)) {
        const json_node *id = json_doc_get(d, e, "id"), *content = json_doc_get(d, e, "content");
        if (!id || id->kind != JSON_INT || id->i < 0 || id->i >= MAX_TOKEN_ID || !content || content->kind != JSON_STRING ||
            content->len == 0)
            return er_fail(ER_ERR_FORMAT, "%s: an added token has no id in [0, %d) or no content", r->path,
                           MAX_TOKEN_ID);
        n = id->i + 1 > n ? id->i + 1 : n;
    }
    gguf_string *tokens = calloc((size_t)n, sizeof *tokens); /* (n) owned by the kv pair */
    int32_t *types;                                          /* (n) */
    char *pads;                                              /* "[PAD<id>]" of each missing id */
    if (!tokens)
        return er_fail(ER_ERR_NO_MEMORY, "%s: out of memory for %lld tokens", r->path, (long long)n);
    if ((st = hf_alloc(b, (size_t)n * sizeof *types, (void **)&types)) != ER_OK) {
        free(tokens);
        return st;
    }
    for (const json_node *e = json_doc_first(d, vocab); e; e = json_doc_next(d, e)) {
        if (tokens[e->i].data) {
            free(tokens);
            return er_fail(ER_ERR_FORMAT, "%s: model.vocab gives id %lld twice", r->path, (long long)e->i);
        }
        tokens[e->i] = (gguf_string){json_doc_key(d, e), e->key_len};
        types[e->i] = TYPE_NORMAL;
    }
    for (const json_node *e = json_doc_first(d, added); e; e = json_doc_next(d, e)) {
        const int64_t id = json_doc_get(d, e, "id")->i;
        const json_node *content = json_doc_get(d, e, "content"), *special = json_doc_get(d, e, "special");
        tokens[id] = (gguf_string){json_doc_str(d, content), content->len};
        types[id] = (special && special->kind == JSON_BOOL && special->i) || looks_special(json_doc_str(d, content))
                        ? TYPE_CONTROL
                        : TYPE_USER_DEFINED;
    }
    size_t n_pad = 0;
    for (int64_t id = 0; id < n; id++)
        n_pad += tokens[id].data ? 0 : 16;
    if ((st = hf_alloc(b, n_pad, (void **)&pads)) != ER_OK) {
        free(tokens);
        return st;
    }
    for (int64_t id = 0; id < n; id++)
        if (!tokens[id].data) {
            const int len = snprintf(pads, 16, "[PAD%lld]", (long long)id);
            tokens[id] = (gguf_string){pads, (uint64_t)len};
            types[id] = TYPE_UNUSED;
            pads += 16;
        }
    *tokens_out = tokens;
    *types_out = types;
    *n_out = n;
    return ER_OK;
}

/* model.merges as "left right" strings (owned by the kv pair), by rank. */
static er_status read_merges(tok_reader *r, const json_node *root, gguf_string **out, int64_t *n_out) {
    const json_doc *d = r->doc;
    const json_node *merges = json_doc_get(d, json_doc_get(d, root, "model"), "merges");
    er_status st;
    *out = NULL;
    *n_out = 0;
    if (!merges || merges->kind != JSON_ARRAY)
        return er_fail(ER_ERR_FORMAT, "%s: missing array 'model.merges'", r->path);
    size_t joined = 0;
    for (const json_node *m = json_doc_first(d, merges); m; m = json_doc_next(d, m)) {
        const json_node *left = json_doc_first(d, m), *right = left ? json_doc_next(d, left) : NULL;
        if (m->kind == JSON_ARRAY && m->len == 2 && left->kind == JSON_STRING && right->kind == JSON_STRING)
            joined += left->len + right->len + 1;
        else if (m->kind != JSON_STRING)
            return er_fail(ER_ERR_FORMAT, "%s: a merge is neither \"left right\" nor [left, right]", r->path);
    }
    char *text; /* (joined) the pairs joined with a space */
    if ((st = hf_alloc(r->b, joined, (void **)&text)) != ER_OK)
        return st;
    gguf_string *list = calloc(merges->len ? merges->len : 1, sizeof *list);
    if (!list)
        return er_fail(ER_ERR_NO_MEMORY, "%s: out of memory for %zu merges", r->path, merges->len);
    size_t i = 0;
    for (const json_node *m = json_doc_first(d, merges); m; m = json_doc_next(d, m), i++) {
        if (m->kind == JSON_STRING) {
            list[i] = (gguf_string){json_doc_str(d, m), m->len};
            continue;
        }
        const json_node *left = json_doc_first(d, m), *right = json_doc_next(d, left);
        list[i] = (gguf_string){text, left->len + 1 + right->len};
        memcpy(text, json_doc_str(d, left), left->len);
        text[left->len] = ' ';
        memcpy(text + left->len + 1, json_doc_str(d, right), right->len);
        text += list[i].len;
    }
    *out = list;
    *n_out = (int64_t)merges->len;
    return ER_OK;
}

/* What tokenizer.json's post_processor says of adding BOS and EOS (1 or 0; -1: nothing),
 * read as gguf-py's SpecialVocab reads it for the converter: ByteLevel adds neither
 * (unless a template says otherwise); a TemplateProcessing whose single-sequence template
 * has more than one piece adds BOS when it begins with a special token, that token being
 * tokenizer_config.json's bos_token or there being none (*first: that token), and EOS
 * when it ends with one. Its other guesses (cls, sep, an EOS override) are not made here. */
static void post_processor_adds(const tok_reader *r, const char *bos, int *add_bos, int *add_eos, const char **first) {
    const json_doc *d = r->doc;
    const json_node *pp = json_doc_get(d, json_doc_root(d), "post_processor");
    const json_node *list = json_doc_get(d, pp, "processors");
    *add_bos = *add_eos = -1;
    *first = NULL;
    for (const json_node *p = list ? json_doc_first(d, list) : pp; p && p->kind == JSON_OBJECT;
         p = list ? json_doc_next(d, p) : NULL) {
        const json_node *type = json_doc_get(d, p, "type"), *single = json_doc_get(d, p, "single");
        if (json_doc_is(d, type, "ByteLevel")) {
            *add_bos = *add_bos < 0 ? 0 : *add_bos;
            *add_eos = *add_eos < 0 ? 0 : *add_eos;
        } else if (json_doc_is(d, type, "TemplateProcessing") && single && single->kind == JSON_ARRAY &&
                   single->len > 1) {
            const json_node *last = json_doc_first(d, single);
            const json_node *head = json_doc_get(d, json_doc_get(d, last, "SpecialToken"), "id");
            while (json_doc_next(d, last))
                last = json_doc_next(d, last);
            const json_node *tail = json_doc_get(d, json_doc_get(d, last, "SpecialToken"), "id");
            if (head && head->kind == JSON_STRING) {
                *first = json_doc_str(d, head);
                *add_bos = !bos || !strcmp(bos, *first);
            }
            if (tail && tail->kind == JSON_STRING)
                *add_eos = 1;
        }
    }
}

/* The chat template: tokenizer_config.json's chat_template (a string, or a list of {name,
 * template} of which "default" is the chat one), else chat_template.jinja (transformers 5
 * saves it there), else chat_template.json's, as the converter looks for it. */
static er_status read_chat_template(tok_reader *r, const json_doc *cfg) {
    hf_build *b = r->b;
    const json_doc *d = cfg;
    const json_node *tmpl = json_doc_get(cfg, json_doc_root(cfg), "chat_template");
    er_status st;
    if (!tmpl || tmpl->kind == JSON_NULL) {
        const char *text;
        size_t len;
        if ((st = hf_read_text(b, "chat_template.jinja", 1, &text, &len)) != ER_OK)
            return st;
        if (text)
            return hf_kv_str(b, "tokenizer.chat_template", text, len);
        if ((st = hf_read_json(b, "chat_template.json", 1, &d)) != ER_OK || !d)
            return st;
        tmpl = json_doc_get(d, json_doc_root(d), "chat_template");
    }
    if (tmpl && tmpl->kind == JSON_ARRAY) {
        const json_node *pick = NULL;
        for (const json_node *t = json_doc_first(d, tmpl); t; t = json_doc_next(d, t))
            if (!pick || json_doc_is(d, json_doc_get(d, t, "name"), "default"))
                pick = t;
        tmpl = json_doc_get(d, pick, "template");
    }
    if (tmpl && tmpl->kind == JSON_STRING)
        return hf_kv_str(b, "tokenizer.chat_template", json_doc_str(d, tmpl), tmpl->len);
    return ER_OK;
}

/* The special ids, add_bos/eos and the chat template from tokenizer_config.json and
 * tokenizer.json's post_processor. */
static er_status read_config(tok_reader *r, const gguf_string *tokens, int64_t n) {
    static const struct {
        const char *name, *key;
        int required; /* a token named but not in the vocabulary is an error (else: no key) */
    } specials[] = {
        {"bos_token", "tokenizer.ggml.bos_token_id", 1},
        {"eos_token", "tokenizer.ggml.eos_token_id", 1},
        {"unk_token", "tokenizer.ggml.unknown_token_id", 1},
        {"pad_token", "tokenizer.ggml.padding_token_id", 1},
        {"mask_token", "tokenizer.ggml.mask_token_id", 0},
    };
    hf_build *b = r->b;
    const json_doc *cfg;
    er_status st;
    if ((st = hf_read_json(b, "tokenizer_config.json", 1, &cfg)) != ER_OK)
        return st;
    int add[2]; /* BOS, EOS: 1, 0, or -1 for tokenizer_config.json to say */
    const char *first;
    post_processor_adds(r, cfg ? config_token(cfg, "bos_token") : NULL, &add[0], &add[1], &first);
    for (size_t i = 0; i < sizeof specials / sizeof specials[0]; i++) {
        const char *text = cfg ? config_token(cfg, specials[i].name) : NULL;
        text = cfg && !text && i == 0 ? first : text; /* a template's leading token, as the converter takes it */
        int64_t id = text ? find_token(tokens, n, text) : -1;
        if (text && id < 0 && specials[i].required)
            return er_fail(ER_ERR_FORMAT, "%s/tokenizer_config.json: %s '%.100s' is not a token of tokenizer.json",
                           b->dir, specials[i].name, text);
        if (id < 0)
            id = i == 0 ? b->bos_id : i == 1 ? b->eos_id : -1; /* config.json's, as the converter falls back */
        if (id >= 0 && id < n && (st = hf_kv_u32(b, specials[i].key, (uint32_t)id)) != ER_OK)
            return st;
    }
    static const char *const add_names[2] = {"add_bos_token", "add_eos_token"};
    static const char *const add_keys[2] = {"tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_eos_token"};
    for (int i = 0; i < 2; i++) {
        const json_node *v = cfg ? json_doc_get(cfg, json_doc_root(cfg), add_names[i]) : NULL;
        if (add[i] < 0 && v && v->kind == JSON_BOOL) /* the post_processor's word first, as the converter's */
            add[i] = (int)v->i;
        if (add[i] >= 0 && (st = hf_kv_bool(b, add_keys[i], add[i])) != ER_OK)
            return st;
    }
    return cfg ? read_chat_template(r, cfg) : ER_OK;
}

/* A token's text and id, sorted by text to find the token a merge forms. */
typedef struct text_id {
    gguf_string text;
    int64_t id;
} text_id;

static int by_text(const void *a, const void *b) {
    const gguf_string *x = &((const text_id *)a)->text, *y = &((const text_id *)b)->text;
    const int c = memcmp(x->data, y->data, x->len < y->len ? x->len : y->len);
    return c ? c : (x->len > y->len) - (x->len < y->len);
}

/* The SentencePiece types and scores (see the header) of tokens[n], from the merges
 * ("left right", by rank) and model.unk_token; user-defined tokens' U+2581 become ' '. */
static er_status spm_types_scores(tok_reader *r, const json_node *root, gguf_string *tokens, int32_t *types, int64_t n,
                                  const gguf_string *merges, int64_t n_merges, float **scores_out) {
    const json_doc *d = r->doc;
    const json_node *unk = json_doc_get(d, json_doc_get(d, root, "model"), "unk_token");
    float *scores;  /* (n) */
    text_id *index; /* (n) */
    er_status st;
    if ((st = hf_alloc(r->b, (size_t)n * sizeof *scores, (void **)&scores)) != ER_OK)
        return st;
    for (int64_t id = 0; id < n; id++) {
        const gguf_string t = tokens[id];
        if (types[id] == TYPE_NORMAL && t.len == 6 && !memcmp(t.data, "<0x", 3) && t.data[5] == '>' &&
            isxdigit((unsigned char)t.data[3]) && isxdigit((unsigned char)t.data[4]))
            types[id] = TYPE_BYTE;
        else if (types[id] == TYPE_NORMAL && unk && unk->kind == JSON_STRING && t.len == unk->len &&
                 !memcmp(t.data, json_doc_str(d, unk), t.len))
            types[id] = TYPE_UNKNOWN;
        scores[id] = types[id] == TYPE_NORMAL ? -(float)(n_merges + 1) : types[id] == TYPE_BYTE ? 0.0f : -1000.0f;
        if (types[id] != TYPE_USER_DEFINED)
            continue;
        char *text; /* the text with each U+2581 (3 bytes) as one space */
        size_t len = 0;
        if ((st = hf_alloc(r->b, t.len, (void **)&text)) != ER_OK)
            return st;
        for (size_t i = 0; i < t.len; i++) {
            const int space = i + 3 <= t.len && !memcmp(t.data + i, SPM_SPACE, 3);
            text[len++] = space ? ' ' : t.data[i];
            i += space ? 2 : 0;
        }
        tokens[id] = (gguf_string){text, len};
    }
    if ((st = hf_alloc(r->b, (size_t)n * sizeof *index, (void **)&index)) != ER_OK)
        return st;
    for (int64_t id = 0; id < n; id++)
        index[id] = (text_id){tokens[id], id};
    qsort(index, (size_t)n, sizeof *index, by_text);
    char joined[512];
    for (int64_t k = n_merges; k-- > 0;) { /* backwards: the first merge that forms a token sets its score */
        const char *space = memchr(merges[k].data, ' ', merges[k].len);
        if (!space || merges[k].len > sizeof joined)
            continue;
        const size_t left = (size_t)(space - merges[k].data);
        memcpy(joined, merges[k].data, left);
        memcpy(joined + left, space + 1, merges[k].len - left - 1);
        const text_id key = {{joined, merges[k].len - 1}, 0};
        const text_id *hit = bsearch(&key, index, (size_t)n, sizeof *index, by_text);
        if (hit && types[hit->id] == TYPE_NORMAL)
            scores[hit->id] = -(float)k;
    }
    *scores_out = scores;
    return ER_OK;
}

er_status hf_tokenizer(hf_build *b) {
    tok_reader r = {b, NULL, {0}};
    er_status st;
    snprintf(r.path, sizeof r.path, "%s/tokenizer.json", b->dir);
    if ((st = hf_read_json(b, "tokenizer.json", 1, &r.doc)) != ER_OK || !r.doc)
        return st;
    const json_node *root = json_doc_root(r.doc);
    const json_node *type = json_doc_get(r.doc, json_doc_get(r.doc, root, "model"), "type");
    if (!json_doc_is(r.doc, type, "BPE"))
        return er_fail(ER_ERR_UNSUPPORTED, "%s: model type '%.40s' is not supported (BPE is)", r.path,
                       json_doc_str(r.doc, type));
    const char *pre = "default";
    gguf_string *tokens = NULL, *merges = NULL;
    int32_t *types = NULL;
    int64_t n_tokens = 0, n_merges = 0;
    int spm;
    if ((st = recognise_spm(&r, root, &spm)) != ER_OK || (!spm && (st = recognise_pre(&r, root, &pre)) != ER_OK) ||
        (st = read_tokens(&r, root, &tokens, &types, &n_tokens)) != ER_OK)
        return st;
    const gguf_value token_list = {.type = GGUF_TYPE_ARRAY, .arr = {GGUF_TYPE_STRING, (uint64_t)n_tokens, NULL, tokens, NULL}};
    const gguf_value type_list = {.type = GGUF_TYPE_ARRAY, .arr = {GGUF_TYPE_INT32, (uint64_t)n_tokens, (const uint8_t *)types, NULL, NULL}};
    /* the token list first: from here on the file owns it (spm_types_scores may still
     * change its entries and the types) */
    if ((st = hf_kv(b, "tokenizer.ggml.tokens", token_list)) != ER_OK ||
        (st = hf_kv_str(b, "tokenizer.ggml.model", spm ? "llama" : "gpt2", spm ? 5 : 4)) != ER_OK ||
        (st = hf_kv_str(b, "tokenizer.ggml.pre", pre, strlen(pre))) != ER_OK ||
        (st = hf_kv(b, "tokenizer.ggml.token_type", type_list)) != ER_OK)
        return st;
    if ((st = read_merges(&r, root, &merges, &n_merges)) != ER_OK)
        return st;
    if (spm) { /* the merges only rank the tokens: scores instead, as tokenizer.model has them */
        float *scores;
        st = spm_types_scores(&r, root, tokens, types, n_tokens, merges, n_merges, &scores);
        free(merges);
        const gguf_value score_list = {.type = GGUF_TYPE_ARRAY,
                                       .arr = {GGUF_TYPE_FLOAT32, (uint64_t)n_tokens, (const uint8_t *)scores, NULL, NULL}};
        if (st != ER_OK || (st = hf_kv(b, "tokenizer.ggml.scores", score_list)) != ER_OK ||
            (st = hf_kv_bool(b, "tokenizer.ggml.add_space_prefix", 0)) != ER_OK)
            return st;
    } else {
        const gguf_value merge_list = {.type = GGUF_TYPE_ARRAY, .arr = {GGUF_TYPE_STRING, (uint64_t)n_merges, NULL, merges, NULL}};
        if ((st = hf_kv(b, "tokenizer.ggml.merges", merge_list)) != ER_OK)
            return st;
    }
    return read_config(&r, tokens, n_tokens);
}
