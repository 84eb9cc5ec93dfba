# EdgeRunner-C. Targets:
#   make              build/edgerunner and build/libedgerunner.a
#   make test         unit tests (plain and under ASan+UBSan), CLI tests, server tests, oracle tests
#   make bench        CPU matvec throughput per weight type, read bandwidth (1 and 2 threads)
#                     and the AVX2 FMA peak (bench/matvec_bench.c)
#   make debug        the same binaries with AddressSanitizer + UBSan, in build/debug
#   make fuzz         every fuzz target below, one after the other, FUZZ_SECONDS each
#   make fuzz-gguf    libFuzzer on the GGUF parser for FUZZ_SECONDS (default 600)
#   make fuzz-json    the same on the JSON reader and writer (src/core/json.c)
#   make fuzz-vocab   the same on the tokenizer, with vocabularies made from the input
#   make fuzz-jinja   the same on the chat template engine (src/chat), seeded with real templates
#   make fuzz-safetensors  the same on the SafeTensors reader (header JSON, shapes, offsets)
#   make format       clang-format the sources

CC := gcc
BUILD ?= build
OPT ?= -O2
CFLAGS := -std=c11 $(OPT) -g -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Iinclude -Isrc -MMD -MP $(EXTRA_CFLAGS)
LDLIBS := -lm -lpthread
DEBUG_FLAGS := -O1 -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer

LIB_SRC := $(sort $(wildcard src/*/*.c src/backend/*/*.c))
# make fuzz runs these, each as fuzz-NAME (a rule below); in every one a UBSan report ends
# the run (-fno-sanitize-recover), as in make debug: a report that only prints is missed
FUZZ_TARGETS := gguf json vocab jinja safetensors

# The CUDA backend is built when nvcc is found (CUDA_HOME or PATH), for sm_90a (H100/H200:
# sm_90 and its warpgroup tensor cores, which the prefill GEMM of gemm_wg.cu uses; another
# CUDA_ARCH, such as sm_80, builds without it). CUDA=0 forces a CPU-only build.
NVCC ?= $(shell command -v nvcc 2>/dev/null)
CUDA ?= $(if $(NVCC),1,0)
ifeq ($(CUDA),1)
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
CUDA_ARCH ?= sm_90a
NVCCFLAGS := -gencode arch=compute_$(CUDA_ARCH:sm_%=%),code=$(CUDA_ARCH) $(if $(filter sm_90a,$(CUDA_ARCH)),-DER_CUDA_WGMMA) -O3 -std=c++17 -Iinclude -Isrc -Xptxas -v -Xcompiler -Wall,-Wextra -MMD -MP
CFLAGS += -DER_HAVE_CUDA -I$(CUDA_HOME)/include
CU_SRC := $(sort $(wildcard src/backend/cuda/*.cu))
LDLIBS += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart -lstdc++
else
LIB_SRC := $(filter-out src/backend/cuda/%,$(LIB_SRC))
CU_SRC :=
endif
# The command line, with the HTTP server (tools/server): only the edgerunner binary links
# libmicrohttpd and jansson; the library stays libc/libm/pthreads. SERVER=0 leaves the
# server out (`serve` then says so), for a machine without those libraries: the GPU
# machine, which cannot install packages.
SERVER ?= 1
ifeq ($(SERVER),1)
CLI_SRC := $(wildcard tools/cli/*.c) $(filter-out tools/server/none.c,$(wildcard tools/server/*.c))
SERVER_LIBS := -lmicrohttpd -ljansson
SERVER_OBJ := $(BUILD)/tools/server/page.o
SERVER_TESTS := $(BUILD)/tests/server/toolcall_test
else
CLI_SRC := $(wildcard tools/cli/*.c) tools/server/none.c
endif
TEST_SRC := $(wildcard tests/unit/*.c)
EXAMPLES := $(patsubst examples/%.c,$(BUILD)/examples/%,$(wildcard examples/*.c))

LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/%.o) $(CU_SRC:%.cu=$(BUILD)/%.cu.o)
CLI_OBJ := $(CLI_SRC:%.c=$(BUILD)/%.o) $(SERVER_OBJ)
TEST_OBJ := $(TEST_SRC:%.c=$(BUILD)/%.o)

.PHONY: all test unit debug fuzz $(addprefix fuzz-,$(FUZZ_TARGETS)) format clean bench
all: $(BUILD)/edgerunner $(BUILD)/libedgerunner.a $(BUILD)/tests/quant_tool $(EXAMPLES) $(BUILD)/tests/sampler_tool \
     $(SERVER_TESTS)

$(BUILD)/libedgerunner.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/edgerunner: $(CLI_OBJ) $(BUILD)/libedgerunner.a
	$(CC) $(CFLAGS) -o $@ $^ $(SERVER_LIBS) $(LDLIBS)

# the chat page (GET /), built into the binary by .incbin
$(BUILD)/tools/server/page.o: tools/server/page.S tools/server/chat.html
	@mkdir -p $(dir $@)
	$(CC) -c -o $@ $<

$(BUILD)/unit_tests: $(TEST_OBJ) $(BUILD)/libedgerunner.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

# the server's tool-call parser on its own, for tests/server (no model writes such text)
$(BUILD)/tests/server/toolcall_test: $(BUILD)/tests/server/toolcall_test.o $(BUILD)/tools/server/toolcall.o \
                                     $(BUILD)/tools/server/text.o
	$(CC) $(CFLAGS) -o $@ $^ $(SERVER_LIBS)

# the reference quantizer and dequantizer on raw files, for tests/quant (Python oracles)
$(BUILD)/tests/quant_tool: $(BUILD)/tests/quant/quant_tool.o $(BUILD)/libedgerunner.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

# examples/*.c: programs on the public header alone, one binary each
$(EXAMPLES): $(BUILD)/examples/%: $(BUILD)/examples/%.o $(BUILD)/libedgerunner.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

# the sampler on given logits and history, for tests/sampler (llama.cpp's penalties)
$(BUILD)/tests/sampler_tool: $(BUILD)/tests/sampler/sampler_tool.o $(BUILD)/libedgerunner.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/bench/matvec_bench: $(BUILD)/bench/matvec_bench.o $(BUILD)/libedgerunner.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

bench: $(BUILD)/bench/matvec_bench
	$(BUILD)/bench/matvec_bench

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c -o $@ $<

# ptxas's register and spill report for each kernel goes to $@.log
$(BUILD)/%.cu.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c -o $@ $< 2> $@.log || (cat $@.log; false)

unit: $(BUILD)/unit_tests $(BUILD)/edgerunner
	$(BUILD)/unit_tests

debug:
	$(MAKE) BUILD=build/debug CUDA=0 OPT="$(DEBUG_FLAGS)" EXTRA_CFLAGS="-fsanitize=address,undefined" all build/debug/unit_tests

# Every test: C unit tests (plain, then under the sanitizers), the CLI's behaviour on
# good and hostile files, then the independent oracles (transformers, llama.cpp, gguf),
# and the CUDA weight layouts on the host (tests/wtypes).
test: all $(BUILD)/unit_tests debug
	$(BUILD)/unit_tests
	EDGERUNNER_CPU_ISA=avx2 $(BUILD)/unit_tests cpu
	EDGERUNNER_CPU_ISA=c $(BUILD)/unit_tests cpu
	build/debug/unit_tests
	tests/tokenizer/run.sh $(BUILD)
	tests/cli/run.sh $(BUILD)/edgerunner
	tests/cli/run.sh build/debug/edgerunner
	tests/server/run.sh $(BUILD)/edgerunner
	tests/server/run.sh build/debug/edgerunner --asan
	tests/oracle/run.sh $(BUILD)
	tests/quant/run.sh $(BUILD)
	tests/sampler/run.sh $(BUILD)
	tests/models/run.sh $(BUILD)
	CXXFLAGS="-fsanitize=address,undefined -fno-sanitize-recover=all" tests/wtypes/run.sh build/debug

FUZZ_SECONDS ?= 600
fuzz: $(addprefix fuzz-,$(FUZZ_TARGETS))

FUZZ_SRC := tests/fuzz/fuzz_gguf.c src/io/gguf.c src/io/mapfile.c src/core/status.c $(wildcard src/quant/*.c)
fuzz-gguf: build/fuzz/fuzz_gguf
	@mkdir -p build/fuzz/corpus
	cp -n tests/data/*.gguf build/fuzz/corpus/ 2>/dev/null || true
	build/fuzz/fuzz_gguf -max_total_time=$(FUZZ_SECONDS) -timeout=5 -rss_limit_mb=2048 build/fuzz/corpus

build/fuzz/fuzz_gguf: $(FUZZ_SRC) $(wildcard src/*/*.h)
	@mkdir -p $(dir $@)
	clang -std=c11 -g -O1 -Iinclude -Isrc -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -o $@ $(FUZZ_SRC)

FUZZ_JSON_SRC := tests/fuzz/fuzz_json.c src/core/json.c src/core/utf8.c
fuzz-json: build/fuzz/fuzz_json
	@mkdir -p build/fuzz/corpus_json
	build/fuzz/fuzz_json -max_total_time=$(FUZZ_SECONDS) -timeout=5 -rss_limit_mb=2048 build/fuzz/corpus_json

build/fuzz/fuzz_json: $(FUZZ_JSON_SRC) $(wildcard src/core/*.h)
	@mkdir -p $(dir $@)
	clang -std=c11 -g -O1 -Iinclude -Isrc -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -o $@ $(FUZZ_JSON_SRC)

FUZZ_VOCAB_SRC := tests/fuzz/fuzz_vocab.c $(wildcard src/tokenizer/*.c) src/io/gguf.c src/io/mapfile.c src/core/status.c src/core/utf8.c \
                  src/io/hf.c src/io/hf_tokenizer.c src/io/safetensors.c src/core/json_doc.c src/core/json.c \
                  $(wildcard src/quant/*.c)
fuzz-vocab: build/fuzz/fuzz_vocab
	@mkdir -p build/fuzz/corpus_vocab
	build/fuzz/fuzz_vocab -max_total_time=$(FUZZ_SECONDS) -timeout=5 -rss_limit_mb=2048 build/fuzz/corpus_vocab

build/fuzz/fuzz_vocab: $(FUZZ_VOCAB_SRC) $(wildcard src/*/*.h)
	@mkdir -p $(dir $@)
	clang -std=c11 -g -O1 -Iinclude -Isrc -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -o $@ $(FUZZ_VOCAB_SRC) -lm

# Seeds: the real templates of shared/data's tokenizers and the synthetic ones of
# tests/tokenizer, each with a conversation; tokens of the template language as a dictionary.
FUZZ_JINJA_SRC := tests/fuzz/fuzz_jinja.c $(wildcard src/chat/*.c) src/core/json.c src/core/utf8.c src/core/status.c \
	src/tokenizer/unicode.c
fuzz-jinja: build/fuzz/fuzz_jinja
	@mkdir -p build/fuzz/corpus_jinja
	python3 tests/fuzz/jinja_seeds.py build/fuzz/corpus_jinja $(wildcard ../shared/data/tokenizers/*/tokenizer_config.json)
	build/fuzz/fuzz_jinja -max_total_time=$(FUZZ_SECONDS) -timeout=5 -rss_limit_mb=2048 -dict=tests/fuzz/jinja.dict \
		build/fuzz/corpus_jinja

build/fuzz/fuzz_jinja: $(FUZZ_JINJA_SRC) $(wildcard src/chat/*.h src/core/*.h src/tokenizer/*.h)
	@mkdir -p $(dir $@)
	clang -std=c11 -g -O1 -Iinclude -Isrc -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -o $@ \
		$(FUZZ_JINJA_SRC)

# Seeds: tests/data/seed.safetensors (two tensors, metadata, an escaped name)
FUZZ_SAFETENSORS_SRC := tests/fuzz/fuzz_safetensors.c src/io/safetensors.c src/io/mapfile.c src/core/json_doc.c src/core/json.c \
	src/core/utf8.c src/core/status.c
fuzz-safetensors: build/fuzz/fuzz_safetensors
	@mkdir -p build/fuzz/corpus_safetensors
	cp -n tests/data/*.safetensors build/fuzz/corpus_safetensors/ 2>/dev/null || true
	build/fuzz/fuzz_safetensors -max_total_time=$(FUZZ_SECONDS) -timeout=5 -rss_limit_mb=2048 build/fuzz/corpus_safetensors

build/fuzz/fuzz_safetensors: $(FUZZ_SAFETENSORS_SRC) $(wildcard src/core/*.h src/io/*.h)
	@mkdir -p $(dir $@)
	clang -std=c11 -g -O1 -Iinclude -Isrc -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -o $@ \
		$(FUZZ_SAFETENSORS_SRC)

format:
	clang-format -i $(LIB_SRC) $(CLI_SRC) $(TEST_SRC) $(wildcard src/*/*.h src/backend/*/*.h include/*.h)

clean:
	rm -rf build

-include $(LIB_OBJ:.o=.d) $(CLI_OBJ:.o=.d) $(TEST_OBJ:.o=.d) $(BUILD)/tests/quant/quant_tool.d $(BUILD)/bench/matvec_bench.d $(EXAMPLES:=.d) $(BUILD)/tests/sampler/sampler_tool.d

