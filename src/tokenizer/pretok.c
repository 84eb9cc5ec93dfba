/*
 * pretok.c - the BPE pre-tokenizers: the split regexes of the model families, hand-coded.
 *
 *   GPT-2:  's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *   Llama-3 and Qwen2 (Qwen2 has \p{N} where Llama-3 has \p{N}{1,3}):
 *           (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}
 *           | ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 *   SmolLM (llama.cpp's "smollm"): first \p{N} (every digit alone), then GPT-2's regex
 *           inside each run between digits.
 *
 * Hugging Face's Split pre-tokenizer takes the regex's successive leftmost matches. Every
 * character is a letter, a number, white space or something else, and some alternative
 * matches at each of them, so the matches tile the text: from each position we try the
 * alternatives in order, with the regex engine's backtracking worked out by hand (the
 * comments at each alternative). One pass, a little lookahead, no allocation: linear time
 * on any input, however long its runs. Invalid UTF-8 bytes count as "something else".
 */
#include "tokenizer/tokenizer.h"

enum { OTHER = 0 };

typedef struct cursor {
    const unsigned char *s;
    size_t n;
} cursor;

/* The class of the character at byte i, and where the next one starts. */
static inline uint8_t class_at(const cursor *c, size_t i, size_t *next, int32_t *cp) {
    const unsigned char b = c->s[i];
    if (b < 0x80) {
        static const uint8_t ascii[128] = {
            ['\t'] = UNI_SPACE, ['\n'] = UNI_SPACE, [0x0b] = UNI_SPACE, [0x0c] = UNI_SPACE, ['\r'] = UNI_SPACE,
            [' '] = UNI_SPACE,
            ['0'] = UNI_NUMBER, ['1'] = UNI_NUMBER, ['2'] = UNI_NUMBER, ['3'] = UNI_NUMBER, ['4'] = UNI_NUMBER,
            ['5'] = UNI_NUMBER, ['6'] = UNI_NUMBER, ['7'] = UNI_NUMBER, ['8'] = UNI_NUMBER, ['9'] = UNI_NUMBER,
            ['A'] = UNI_LETTER, ['B'] = UNI_LETTER, ['C'] = UNI_LETTER, ['D'] = UNI_LETTER, ['E'] = UNI_LETTER,
            ['F'] = UNI_LETTER, ['G'] = UNI_LETTER, ['H'] = UNI_LETTER, ['I'] = UNI_LETTER, ['J'] = UNI_LETTER,
            ['K'] = UNI_LETTER, ['L'] = UNI_LETTER, ['M'] = UNI_LETTER, ['N'] = UNI_LETTER, ['O'] = UNI_LETTER,
            ['P'] = UNI_LETTER, ['Q'] = UNI_LETTER, ['R'] = UNI_LETTER, ['S'] = UNI_LETTER, ['T'] = UNI_LETTER,
            ['U'] = UNI_LETTER, ['V'] = UNI_LETTER, ['W'] = UNI_LETTER, ['X'] = UNI_LETTER, ['Y'] = UNI_LETTER,
            ['Z'] = UNI_LETTER,
            ['a'] = UNI_LETTER, ['b'] = UNI_LETTER, ['c'] = UNI_LETTER, ['d'] = UNI_LETTER, ['e'] = UNI_LETTER,
            ['f'] = UNI_LETTER, ['g'] = UNI_LETTER, ['h'] = UNI_LETTER, ['i'] = UNI_LETTER, ['j'] = UNI_LETTER,
            ['k'] = UNI_LETTER, ['l'] = UNI_LETTER, ['m'] = UNI_LETTER, ['n'] = UNI_LETTER, ['o'] = UNI_LETTER,
            ['p'] = UNI_LETTER, ['q'] = UNI_LETTER, ['r'] = UNI_LETTER, ['s'] = UNI_LETTER, ['t'] = UNI_LETTER,
            ['u'] = UNI_LETTER, ['v'] = UNI_LETTER, ['w'] = UNI_LETTER, ['x'] = UNI_LETTER, ['y'] = UNI_LETTER,
            ['z'] = UNI_LETTER,
        };
        *next = i + 1;
        *cp = b;
        return ascii[b];
    }
    size_t k = i;
    *cp = utf8_next(c->s, c->n, &k);
    *next = k;
    return unicode_class(*cp) & (UNI_LETTER | UNI_NUMBER | UNI_SPACE);
}

/* The end of the run of characters whose class has a bit of `mask`, from byte i. */
static size_t run_of(const cursor *c, size_t i, uint8_t mask) {
    while (i < c->n) {
        size_t next;
        int32_t cp;
        if (!(class_at(c, i, &next, &cp) & mask))
            break;
        i = next;
    }
    return i;
}

/* The end of the run of characters of no class (not letter, number or space). */
static size_t run_of_other(const cursor *c, size_t i) {
    while (i < c->n) {
        size_t next;
        int32_t cp;
        if (class_at(c, i, &next, &cp) != OTHER)
            break;
        i = next;
    }
    return i;
}

static int fold_eq(int32_t cp, char lower) {
    /* (?i:...) as Hugging Face tokenizers runs it: ASCII case only (U+017F LONG S, which
     * Unicode folds to s, does not match: measured) */
    return cp == lower || cp == lower - 32;
}

/* The length in bytes of a contraction ('s 't 're 've 'm 'll 'd) at byte i, or 0. */
static size_t contraction(const cursor *c, size_t i, int ignore_case) {
    if (c->s[i] != '\'' || i + 1 >= c->n)
        return 0;
    size_t n1, n2 = 0;
    int32_t a, b = -1;
    class_at(c, i + 1, &n1, &a);
    if (n1 < c->n)
        class_at(c, n1, &n2, &b);
    if (!ignore_case) {
        if (a == 's' || a == 't' || a == 'm' || a == 'd')
            return n1 - i;
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
            return n2 - i;
        return 0;
    }
    if (fold_eq(a, 's') || fold_eq(a, 't') || fold_eq(a, 'm') || fold_eq(a, 'd'))
        return n1 - i;
    if (b >= 0 && ((fold_eq(a, 'r') && fold_eq(b, 'e')) || (fold_eq(a, 'v') && fold_eq(b, 'e')) ||
                   (fold_eq(a, 'l') && fold_eq(b, 'l'))))
        return n2 - i;
    return 0;
}

/* The end of the white-space alternatives at byte i (a space character):
 * with_newline_rule: \s*[\r\n]+ first: \s* takes the whole run, then gives characters
 *   back until [\r\n]+ can match, i.e. the match ends after the run's last \r or \n.
 * \s+(?!\S): the whole run at the end of the text; else the run less its last character
 *   (which is a space, so the lookahead holds), when that leaves at least one.
 * \s+: the run. */
static size_t space_end(const cursor *c, size_t i, int with_newline_rule) {
    size_t k = i, last_start = i, after_newline = 0;
    while (k < c->n) {
        size_t next;
        int32_t cp;
        if (!(class_at(c, k, &next, &cp) & UNI_SPACE))
            break;
        if (cp == '\r' || cp == '\n')
            after_newline = next;
        last_start = k;
        k = next;
    }
    if (with_newline_rule && after_newline)
        return after_newline;
    if (k == c->n || last_start == i)
        return k;
    return last_start;
}

static size_t match_gpt2(const cursor *c, size_t i) {
    size_t n;
    if ((n = contraction(c, i, 0)))
        return i + n;
    size_t j = i, next;
    int32_t cp;
    if (c->s[i] == ' ' && i + 1 < c->n)
        j = i + 1; /* " ?" then the class; if that fails the space is white space below */
    const uint8_t cls = class_at(c, j, &next, &cp);
    if (cls & UNI_LETTER)
        return run_of(c, next, UNI_LETTER);
    if (cls & UNI_NUMBER)
        return run_of(c, next, UNI_NUMBER);
    if (cls == OTHER)
        return run_of_other(c, next);
    return space_end(c, i, 0);
}

static size_t match_llama3(const cursor *c, size_t i, int max_digits) {
    size_t n, next;
    int32_t cp;
    if ((n = contraction(c, i, 1)))
        return i + n;
    const uint8_t cls = class_at(c, i, &next, &cp);
    /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    if (cls & UNI_LETTER)
        return run_of(c, next, UNI_LETTER);
    if (!(cls & UNI_NUMBER) && cp != '\r' && cp != '\n' && next < c->n) {
        size_t after;
        int32_t cp2;
        if (class_at(c, next, &after, &cp2) & UNI_LETTER)
            return run_of(c, after, UNI_LETTER);
    }
    /* \p{N}{1,max_digits} */
    if (cls & UNI_NUMBER) {
        for (int d = 1; d < max_digits && next < c->n; d++) {
            size_t after;
            if (!(class_at(c, next, &after, &cp) & UNI_NUMBER))
                break;
            next = after;
        }
        return next;
    }
    /* " ?[^\s\p{L}\p{N}]+[\r\n]*" */
    size_t j = i;
    if (cp == ' ' && next < c->n)
        j = next;
    size_t after;
    int32_t cpj;
    if (class_at(c, j, &after, &cpj) == OTHER) {
        size_t k = run_of_other(c, after);
        while (k < c->n && (c->s[k] == '\r' || c->s[k] == '\n'))
            k++;
        return k;
    }
    /* \s*[\r\n]+ | \s+(?!\S) | \s+ */
    return space_end(c, i, 1);
}

/* SmolLM: each digit is a piece; the text between digits goes through GPT-2's regex. */
static er_status split_smollm(const cursor *c, pretok_emit emit, void *user) {
    for (size_t i = 0; i < c->n;) {
        size_t next, end = i;
        int32_t cp;
        if (class_at(c, i, &next, &cp) & UNI_NUMBER) {
            end = next;
        } else {
            size_t run = i;
            while (run < c->n && !(class_at(c, run, &next, &cp) & UNI_NUMBER))
                run = next;
            const cursor seg = {c->s, run}; /* positions stay absolute */
            for (size_t k = i; k < run; k = end) {
                end = match_gpt2(&seg, k);
                er_status st = emit(user, (const char *)c->s + k, end - k);
                if (st != ER_OK)
                    return st;
            }
            i = run;
            continue;
        }
        er_status st = emit(user, (const char *)c->s + i, end - i);
        if (st != ER_OK)
            return st;
        i = end;
    }
    return ER_OK;
}

er_status pretok_split(enum vocab_pre pre, const char *text, size_t n, pretok_emit emit, void *user) {
    const cursor c = {(const unsigned char *)text, n};
    if (pre == PRE_SMOLLM)
        return split_smollm(&c, emit, user);
    for (size_t i = 0; i < n;) {
        const size_t end = pre == PRE_GPT2 ? match_gpt2(&c, i) : match_llama3(&c, i, pre == PRE_QWEN2 ? 1 : 3);
        er_status st = emit(user, text + i, end - i);
        if (st != ER_OK)
            return st;
        i = end;
    }
    return ER_OK;
}
