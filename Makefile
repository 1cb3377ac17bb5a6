# ocellus build. Run ./configure first; it writes config.mk (read here) and config.h.
#   make            libocellus.a, libocellus.so and the ocellus CLI
#   make check      builds and runs every test (tests/test_*.c programs, tests/test_*.sh scripts) and
#                   the embedding example; ends with one line "N passed, N failed[, N skipped]"
#   make fuzz       builds the libFuzzer targets (clang); make fuzz-run FUZZ_SECONDS=60 runs them;
#                   make fuzz-long FUZZ_JOBS=N the 10^7-execution campaign; make fuzz-bundle packs
#                   it for a machine without clang (build/fuzz-bundle.tar.gz)
#   make install    PREFIX=... DESTDIR=... (also the bundled models, under PREFIX/share/ocellus/)
#   make -s print-libs  flags to build a program against this tree: cc prog.c $(make -s print-libs)
# Sources are found by wildcard: a new src/<concept>/*.c, opencl/*.c, examples/tools/*.c, examples/cli/*.c or
# tests/test_*.c needs no Makefile edit. Files named *_avx2.c, *_avx512.c, *_neon.c hold one ISA's
# kernels and get that ISA's flags.
#   libocellus.a      the runtime: src/*/ (by concept), opencl/ (host code + kernels), port/
#   build/libocellus-tools.a  examples/tools/ (calibration, converter, JSON, safetensors, scenes + eval,
#                     roofline): linked by the CLI and the tests, never in the runtime
#   ocellus           examples/cli/: the program, every command (main.c dispatches) over both libraries

-include config.mk
ifndef CONFIG_DONE
$(error config.mk is missing: run ./configure first)
endif

VERSION := 0.1.0
B := build

BASE_CFLAGS = -std=c11 -fPIC $(OPT_CFLAGS) $(WARN_CFLAGS) $(SAN_FLAGS) -pthread \
              -I. -Iinclude -Isrc -Iport -Iexamples $(USER_CFLAGS)
LIB_CFLAGS  = $(BASE_CFLAGS) -fvisibility=hidden -DOC_BUILDING_LIBRARY $(DEP_CFLAGS)
LINK_FLAGS  = $(SAN_FLAGS) -pthread $(USER_LDFLAGS)
LIBS        = $(DEP_LIBS) -lm

# ---- library ---------------------------------------------------------------------------------
# isa_filter: drops the per-ISA kernel files this configuration does not build.
isa_filter = $(filter-out $(if $(filter 1,$(HAVE_AVX2)),,%_avx2.c) \
                          $(if $(filter 1,$(HAVE_AVX512)),,%_avx512.c) \
                          $(if $(filter 1,$(HAVE_NEON)),,%_neon.c),$(1))
LIB_SRC := $(call isa_filter,$(wildcard src/*/*.c) $(wildcard port/*.c))
ifeq ($(HAVE_OPENCL),1)
LIB_SRC += $(wildcard opencl/*.c)
endif
LIB_OBJ := $(LIB_SRC:%.c=$(B)/%.o)
TOOLS_SRC := $(call isa_filter,$(wildcard examples/tools/*.c))
TOOLS_OBJ := $(TOOLS_SRC:%.c=$(B)/%.o)
TOOLS_LIB := $(B)/libocellus-tools.a

# OpenCL kernels (opencl/kernels/*.cl) are embedded as C strings by a generator built with the host
# compiler, so cross builds need no Python and no target binary at build time.
CL_SRC := $(sort $(wildcard opencl/kernels/*.cl))
ifeq ($(HAVE_OPENCL),1)
LIB_OBJ += $(B)/cl_embedded.o
endif

$(B)/%_avx2.o:   ISA_CFLAGS = $(AVX2_CFLAGS)
$(B)/%_avx512.o: ISA_CFLAGS = $(AVX512_CFLAGS)
$(B)/%_neon.o:   ISA_CFLAGS = $(NEON_CFLAGS)

$(B)/%.o: %.c config.h config.mk
	@mkdir -p $(@D)
	$(CC) $(LIB_CFLAGS) $(ISA_CFLAGS) -MMD -MP -c $< -o $@

$(B)/embed_cl: opencl/kernels/embed.c
	@mkdir -p $(@D)
	$(HOSTCC) -std=c11 -O1 -Wall -Wextra -o $@ $<

$(B)/cl_embedded.c: $(B)/embed_cl $(CL_SRC)
	$(B)/embed_cl $@ $(CL_SRC)

$(B)/cl_embedded.o: $(B)/cl_embedded.c
	$(CC) $(LIB_CFLAGS) -c $< -o $@

libocellus.a: $(LIB_OBJ)
	rm -f $@
	$(AR) rcs $@ $(LIB_OBJ)

$(TOOLS_LIB): $(TOOLS_OBJ)
	rm -f $@
	$(AR) rcs $@ $(TOOLS_OBJ)

libocellus.so: $(LIB_OBJ)
	$(CC) -shared -o $@ $(LIB_OBJ) $(LINK_FLAGS) $(LIBS)

# ---- CLI ---------------------------------------------------------------------------------------
CLI_SRC := $(wildcard examples/cli/*.c)
CLI_OBJ := $(CLI_SRC:%.c=$(B)/%.o)
$(B)/examples/cli/%.o: examples/cli/%.c config.h config.mk
	@mkdir -p $(@D)
	$(CC) $(BASE_CFLAGS) $(DEP_CFLAGS) -MMD -MP -c $< -o $@

# ocellus serve (examples/serve/): built when configure found libmicrohttpd (HAVE_SERVER), else a
# stub that says so; only the CLI links SERVER_LIBS.
ifeq ($(HAVE_SERVER),1)
SERVE_SRC := $(filter-out examples/serve/serve_none.c,$(wildcard examples/serve/*.c))
else
SERVE_SRC := examples/serve/serve_none.c
endif
SERVE_OBJ := $(SERVE_SRC:%.c=$(B)/%.o)
$(B)/examples/serve/%.o: examples/serve/%.c config.h config.mk
	@mkdir -p $(@D)
	$(CC) $(BASE_CFLAGS) $(DEP_CFLAGS) $(SERVER_CFLAGS) -MMD -MP -c $< -o $@

ocellus: $(CLI_OBJ) $(SERVE_OBJ) $(TOOLS_LIB) libocellus.a
	$(CC) -o $@ $(CLI_OBJ) $(SERVE_OBJ) $(TOOLS_LIB) libocellus.a $(LINK_FLAGS) $(LIBS) $(SERVER_LIBS)

all: libocellus.a libocellus.so ocellus
.DEFAULT_GOAL := all

# ---- tests -------------------------------------------------------------------------------------
# Each tests/test_*.c is one program; tests/support/*.c is linked into every test program.
TEST_SRC     := $(sort $(wildcard tests/test_*.c))
TEST_BIN     := $(TEST_SRC:tests/%.c=$(B)/tests/%)
SUPPORT_SRC  := $(wildcard tests/support/*.c)
SUPPORT_OBJ  := $(SUPPORT_SRC:%.c=$(B)/%.o)

$(B)/tests/%.o: tests/%.c config.h config.mk
	@mkdir -p $(@D)
	$(CC) $(BASE_CFLAGS) -Itests $(DEP_CFLAGS) -MMD -MP -c $< -o $@

$(B)/tests/test_%: $(B)/tests/test_%.o $(SUPPORT_OBJ) $(TOOLS_LIB) libocellus.a
	$(CC) -o $@ $< $(SUPPORT_OBJ) $(TOOLS_LIB) libocellus.a $(LINK_FLAGS) $(LIBS)

TEST_SH      := $(sort $(wildcard tests/test_*.sh))

tests: $(TEST_BIN)

# The embedding example sees only the public header and the static library. EMBED_MODEL: the
# model make check runs it with (text GGUF, then mmproj GGUF).
EMBED_MODEL = examples/demo/ocellus-demo.gguf examples/demo/ocellus-demo-mmproj.gguf
EMBED_BIN   = $(B)/examples/embed/embed
$(EMBED_BIN): examples/embed/embed.c include/ocellus.h libocellus.a
	@mkdir -p $(@D)
	$(CC) -std=c11 $(OPT_CFLAGS) $(WARN_CFLAGS) $(SAN_FLAGS) $(USER_CFLAGS) -Iinclude -o $@ $< libocellus.a $(LINK_FLAGS) $(LIBS)

check: all $(TEST_BIN) $(EMBED_BIN)
	@OC_EMBED_BIN="$(EMBED_BIN)" OC_EMBED_MODEL="$(EMBED_MODEL)" MAKE="$(MAKE)" \
	  sh tests/run.sh "$(TARGET_EXEC)" $(TEST_BIN) $(TEST_SH)

# ---- fuzzing (clang + libFuzzer, ASan + UBSan) ----------------------------------------------------
FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 60
FUZZ_FLAGS   := -std=c11 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
                -fsanitize-coverage-ignorelist=tests/fuzz/coverage_ignore.txt \
                -I. -Iinclude -Isrc -Iport -Iexamples -pthread -DOC_FUZZING
FUZZ_SRC     := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_BIN     := $(FUZZ_SRC:tests/fuzz/%.c=$(B)/fuzz/%)
# The fuzzers compile the library sources themselves (no OpenCL), with the ISA kernels this
# configuration builds: a context runs the best the CPU has (oc_isa_best), as in production.
FUZZ_LIB_SRC := $(call isa_filter,$(wildcard src/*/*.c) $(wildcard port/*.c) $(wildcard examples/tools/*.c)) \
                examples/serve/serve_request.c

FUZZ_LIB_OBJ := $(FUZZ_LIB_SRC:%.c=$(B)/fuzz/lib/%.o)
# Speed without losing what the inputs reach (TESTING.md "Fuzzing speed"): the numeric kernels,
# which tests/fuzz/coverage_ignore.txt leaves uninstrumented for coverage, are built at -O2 (ASan
# and UBSan still check every access); the per-pixel and per-byte loops below keep their edge
# coverage but lose the comparison callbacks (trace-cmp), which were most of fuzz_ppm's and
# fuzz_tokenizer's time and only ever compare loop counters and table entries.
FUZZ_KERNEL_OBJ := $(patsubst %.c,$(B)/fuzz/lib/%.o,$(filter src/kernels/% src/attention/attn%,$(FUZZ_LIB_SRC)))
FUZZ_NOCMP_OBJ  := $(patsubst %.c,$(B)/fuzz/lib/%.o,src/image/image_resize.c src/image/image_prep.c \
                     src/tokenizer/tok_bpe.c src/tokenizer/unicode_nfc.c)
$(FUZZ_KERNEL_OBJ): FUZZ_OBJ_FLAGS := -O2
$(FUZZ_NOCMP_OBJ):  FUZZ_OBJ_FLAGS := -fno-sanitize-coverage=trace-cmp

$(B)/fuzz/lib/%.o: %.c config.h tests/fuzz/coverage_ignore.txt Makefile
	@mkdir -p $(@D)
	$(FUZZ_CC) $(subst fuzzer,fuzzer-no-link,$(FUZZ_FLAGS)) $(FUZZ_OBJ_FLAGS) $(ISA_CFLAGS) $(DEP_CFLAGS) -MMD -MP -c $< -o $@

# --as-needed: the targets use no OpenCL, CLBlast or SLEEF, so they do not depend on them at run time
$(B)/fuzz/%: tests/fuzz/%.c $(FUZZ_LIB_OBJ)
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_FLAGS) $(DEP_CFLAGS) -o $@ $< $(FUZZ_LIB_OBJ) -Wl,--as-needed $(DEP_LIBS) -lm

fuzz: $(FUZZ_BIN)

# make fuzz-run: every target for FUZZ_SECONDS, FUZZ_RUN_JOBS targets at a time (default: one per
# core); each prints its executions and peak RSS when it ends, or its log's tail on a crash.
FUZZ_RUN_JOBS ?= $(shell nproc 2>/dev/null || echo 1)
fuzz-run: $(FUZZ_BIN)
	@printf '%s\n' $(FUZZ_BIN) | xargs -P $(FUZZ_RUN_JOBS) -I{} sh -c '\
	  f={}; n=$$(basename $$f); mkdir -p fuzz-out/$$n; \
	  if $$f -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 fuzz-out/$$n tests/fuzz/corpus/$$n \
	       >fuzz-out/$$n.log 2>&1; then \
	    echo "== $$n ($(FUZZ_SECONDS) s)" $$(grep -E "stat::(number_of_executed_units|peak_rss)" fuzz-out/$$n.log); \
	  else echo "== $$n: CRASH"; tail -40 fuzz-out/$$n.log; exit 255; fi'

# make fuzz-long (not in CI): every target until FUZZ_RUNS executions (issue 21: 10^7), one target
# at a time, each with FUZZ_JOBS parallel workers whose executions add up; FUZZ_LONG_SECONDS (0:
# none) caps each target. Per-target executions, crashes and seconds go to fuzz-out/long/summary.txt
# (TESTING.md); exits non-zero on a crash. The work is tests/fuzz/run-long.sh, which the bundle runs too.
FUZZ_RUNS         ?= 10000000
FUZZ_JOBS         ?= 1
FUZZ_LONG_SECONDS ?= 0
fuzz-long: $(FUZZ_BIN)
	FUZZ_RUNS=$(FUZZ_RUNS) FUZZ_JOBS=$(FUZZ_JOBS) FUZZ_LONG_SECONDS=$(FUZZ_LONG_SECONDS) \
	  sh tests/fuzz/run-long.sh $(B)/fuzz tests/fuzz/corpus fuzz-out/long

# make fuzz-bundle: build/fuzz-bundle.tar.gz, the built targets with every shared library they load
# (glibc's loader included), the seed corpora, the Qwen2 vocabulary when ../shared has it, and
# run.sh, so the long campaign runs on another x86-64 Linux with no clang and no packages
# (tests/fuzz/bundle.sh; TESTING.md "Long fuzzing").
fuzz-bundle: $(FUZZ_BIN)
	sh tests/fuzz/bundle.sh $(B)/fuzz $(B)/fuzz-bundle.tar.gz

# ---- load (not in CI) ----------------------------------------------------------------------------
# make soak: tests/soak/soak.c, SOAK_QUESTIONS through one context and SOAK_PER_THREAD on each of
# 8 contexts sharing one model; with ./configure --enable-tsan it runs under ThreadSanitizer.
SOAK_QUESTIONS  ?= 10000
SOAK_PER_THREAD ?= 100
$(B)/soak: tests/soak/soak.c libocellus.a
	@mkdir -p $(@D)
	$(CC) -std=c11 $(OPT_CFLAGS) $(WARN_CFLAGS) $(SAN_FLAGS) $(USER_CFLAGS) -Iinclude -o $@ $< libocellus.a $(LINK_FLAGS) $(LIBS)
soak: $(B)/soak
	$(TARGET_EXEC) $(B)/soak $(SOAK_QUESTIONS) $(SOAK_PER_THREAD)

# ---- install -------------------------------------------------------------------------------------
DESTDIR ?=
# The bundled models, installed under PREFIX/share/ocellus/, where the CLI finds them when no -m is
# given (examples/tools/cli/demo_model.c), and the demo's sample picture (PPM, and the same as JPEG).
DEMO_DATA = examples/demo/ocellus-demo.gguf examples/demo/ocellus-demo-mmproj.gguf examples/demo/shapes.ppm \
            examples/demo/shapes.jpg
LONG_DATA = examples/long/ocellus-long.gguf examples/long/ocellus-long-mmproj.gguf
ocellus.pc: config.mk
	@printf '%s\n' 'prefix=$(PREFIX)' 'includedir=$${prefix}/include' 'libdir=$${prefix}/lib' '' \
	  'Name: ocellus' 'Description: CPU-first runtime for small vision-language models' \
	  'Version: $(VERSION)' 'Cflags: -I$${includedir}' 'Libs: -L$${libdir} -locellus' \
	  'Libs.private: $(DEP_LIBS) -lm -pthread' >$@

install: all ocellus.pc
	mkdir -p $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/bin
	cp include/ocellus.h include/ocellus_gguf.h $(DESTDIR)$(PREFIX)/include/
	cp libocellus.a libocellus.so $(DESTDIR)$(PREFIX)/lib/
	cp ocellus.pc $(DESTDIR)$(PREFIX)/lib/pkgconfig/
	cp ocellus $(DESTDIR)$(PREFIX)/bin/
	mkdir -p $(DESTDIR)$(PREFIX)/share/ocellus/demo $(DESTDIR)$(PREFIX)/share/ocellus/long
	cp $(DEMO_DATA) $(DESTDIR)$(PREFIX)/share/ocellus/demo/
	cp $(LONG_DATA) $(DESTDIR)$(PREFIX)/share/ocellus/long/

# The compiler and linker flags for a program built against this tree's static library, without
# installing: cc prog.c $$(make -s print-libs) (the same libraries pkg-config --static lists).
print-libs:
	@echo '-I$(CURDIR)/include $(CURDIR)/libocellus.a $(LINK_FLAGS) $(LIBS)'

clean:
	rm -rf $(B) libocellus.a libocellus.so ocellus ocellus.pc fuzz-out

distclean: clean
	rm -f config.mk config.h config.log

.PHONY: all check tests fuzz fuzz-run fuzz-long fuzz-bundle soak install print-libs clean distclean ocellus.pc
.SECONDARY:

-include $(shell find $(B) -name '*.d' 2>/dev/null)
