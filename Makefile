# fedsim -- one non-recursive Makefile.
#   make          release build of build/release/fedsim (installs missing Debian packages first)
#   make run      build, then run scenarios/default.yaml (about two minutes)
#   make test     the pre-commit gate: ASan+UBSan build, fixed seeds, one BLAS thread;
#                 ends on one line "N passed, N failed"
#   make bench    throughput benchmarks (-O3 -march=native, own build dir; not a test)
#   make check    format, symbol prefixes, layering and banned calls, then make test
#   make mpi      build/mpi/fedsim-mpi with mpicc: `mpirun -np N build/mpi/fedsim-mpi run ...`
#                 trains client jobs on MPI ranks 1..N-1 (installs Open MPI when missing); the
#                 default build has no MPI dependency
#   make fuzz     libFuzzer targets (clang), each run FUZZ_SECONDS (60) on its corpus in
#                 tests/fuzz/corpus/; what they find is kept there, and make test replays it
#   make install  build, then copy fedsim (and fedsim-mpi when built) to PREFIX/bin and what it
#                 reads at run time to PREFIX/share/fedsim (PREFIX=/usr/local; DESTDIR honoured);
#                 make uninstall removes them
#   V=1           print the full compiler command lines (default: one "  CC sim/engine.o" line each)
# Each mode builds in build/<mode>, so flags never mix. The public targets first run `deps`, then
# re-enter make with MODE set: pkg-config is only asked once the packages are surely installed.
MODE ?= release
BUILD := build/$(MODE)
# Quiet build lines, "  CC sim/engine.o", unless V=1 asks for the commands themselves (a first
# `make run` otherwise scrolls dozens of compiler lines past before the run says anything).
ifeq ($(V),1)
Q :=
SAY := @:
else
Q := @
SAY := @printf '  %-3s %s\n'
endif

# Debian packages the build, the tests and the default run need (DESIGN.md section 1).
DEPS_DEB := gcc make pkg-config libopenblas-dev libev-dev libmsgpack-dev libyaml-dev \
            zlib1g-dev liblmdb-dev gnuplot-nox dataset-fashion-mnist

# Open MPI for `make mpi` and its test only (MPICH works too:
# make mpi MPICC=mpicc.mpich BUILD=build/mpich).
DEPS_MPI_DEB := libopenmpi-dev openmpi-bin

# clang and its libFuzzer runtime for `make fuzz` only (the replay in make test uses gcc).
DEPS_FUZZ_DEB := clang libclang-rt-14-dev

PKGS := openblas msgpack yaml-0.1 zlib lmdb
STD := -std=c11 -D_POSIX_C_SOURCE=200809L
WARN := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wvla \
        -Wformat=2 -Wundef -Wpointer-arith -Wcast-qual
SAN := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
# release builds for this machine, as bench does, so `make bench` measures the code `make run` runs
OPT_release := -O3 -march=native -g
OPT_test := -O1 -g $(SAN)
OPT_bench := -O3 -march=native -DNDEBUG -g
# The MPI build is optimized, not sanitized: LeakSanitizer reports the MPI library's own
# allocations at exit, and the MPI test compares its outputs with the sanitized fedsim's.
OPT_mpi := -O3 -march=native -g -DFEDSIM_MPI
MPICC ?= mpicc
ifeq ($(MODE),mpi)
CC := $(MPICC)
endif

# libev is linked statically into fedsim-mpi: its shared library also exports a libevent
# emulation (event_add, ...), which would shadow the real libevent Open MPI's runtime calls and
# crash MPI_Init; from libev.a only ev.o, the ev_* functions, is linked.
LIBEV_release := -lev
LIBEV_test := -lev
LIBEV_bench := -lev
LIBEV_mpi := -l:libev.a
ifneq ($(MAKECMDGOALS),deps)
DEPS_CFLAGS = $(shell pkg-config --cflags $(PKGS))
DEPS_LIBS = $(shell pkg-config --libs $(PKGS)) $(LIBEV_$(MODE)) -lm
endif
ALL_CFLAGS = -DFEDSIM_ROOT=\"$(CURDIR)\" $(STD) $(WARN) $(OPT_$(MODE)) -I. $(DEPS_CFLAGS) $(CFLAGS)
ALL_LDFLAGS = $(filter -fsanitize=%,$(OPT_$(MODE))) $(LDFLAGS)

$(BUILD)/nn/%.o: EXTRA_CFLAGS := -Wdouble-promotion

# The fedsim program: main.c's command table, the helpers its commands share (sim/cmd.c) and one
# file per command (sim/cmd_*.c). They are linked into fedsim and fedsim-mpi only, never into the
# tests; sim/mpi.c and sim/cmd_mpi.c (ranks) into fedsim-mpi only.
MPI_SRC := sim/mpi.c sim/cmd_mpi.c
CMD_SRC := sim/main.c sim/cmd.c $(filter-out $(MPI_SRC),$(wildcard sim/cmd_*.c))
CMD_OBJ := $(CMD_SRC:%.c=$(BUILD)/%.o)
LIB_SRC := $(filter-out $(CMD_SRC) $(MPI_SRC),$(wildcard sim/*.c nn/*.c devices/*.c algos/*.c plots/*.c))
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/%.o)
TEST_BIN := $(patsubst tests/%.c,$(BUILD)/tests/%,$(wildcard tests/test_*.c))
BENCH_BIN := $(patsubst tests/%.c,$(BUILD)/tests/%,$(wildcard tests/bench/bench_*.c))

# Fuzzing (issue 37): one libFuzzer harness per decoder, tests/fuzz/fuzz_<name>.c, with its corpus
# in tests/fuzz/corpus/<name>/ (adding a target is adding those two). make test links each harness
# with tests/fuzz/replay.c under gcc and replays its corpus like any test binary; `make fuzz`
# builds them with clang in build/fuzz. FUZZ selects targets, FUZZ_SECONDS is each one's budget.
FUZZ_NAMES := $(patsubst tests/fuzz/fuzz_%.c,%,$(wildcard tests/fuzz/fuzz_*.c))
FUZZ ?= $(FUZZ_NAMES)
FUZZ_SECONDS ?= 60
OPT_fuzz := -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
            -fno-omit-frame-pointer -fsanitize-coverage-ignorelist=tests/fuzz/coverage-ignore.txt
LIBEV_fuzz := -lev
ifeq ($(MODE),fuzz)
CC := clang
$(LIB_OBJ): tests/fuzz/coverage-ignore.txt
endif
TEST_BIN += $(FUZZ_NAMES:%=$(BUILD)/tests/fuzz/replay_%)

.PHONY: all run docs test bench check deps build run-tests run-bench check-format format \
        check-symbols check-layers check-style clean mpi mpi-deps build-mpi fuzz fuzz-deps run-fuzz \
        install uninstall
all: deps
	@$(MAKE) --no-print-directory MODE=release build

build: $(BUILD)/fedsim

run: all
	./build/release/fedsim run scenarios/default.yaml

# scenarios/README.md's key tables are `fedsim keys --markdown`, between its marker lines; this
# writes them there (tests/test_sim_readme fails while they are stale).
docs: all
	@./build/release/fedsim keys --markdown >build/keys.md
	@awk 'BEGIN { while ((getline l <"build/keys.md") > 0) gen = gen l "\n" } \
	     /^<!-- end keys -->$$/ { skip = 0 } !skip { print } \
	     /^<!-- keys: / { printf "%s\n", gen; skip = 1 }' scenarios/README.md >build/README.md.new
	@grep -q '^<!-- end keys -->$$' build/README.md.new && mv build/README.md.new scenarios/README.md
	@echo "scenarios/README.md: key tables written"

# `make install`: fedsim finds its catalog (and the traces and phone data beside it) in ../share/fedsim from its
# own binary (sim_default_catalog), so an installed tree works from any folder and may be moved.
# The example scenarios go along (PREFIX/share/fedsim/scenarios). INSTALL_BIN installs that
# binary instead of building the release one, and no fedsim-mpi (tests/test_sim_install installs
# the test build).
PREFIX ?= /usr/local
DATADIR = $(DESTDIR)$(PREFIX)/share/fedsim
INSTALL_BIN ?=
install: $(if $(INSTALL_BIN),,all)
	install -d $(DESTDIR)$(PREFIX)/bin $(DATADIR)/devices/traces $(DATADIR)/devices/phones \
	    $(DATADIR)/scenarios
	install -m 755 $(or $(INSTALL_BIN),build/release/fedsim) $(DESTDIR)$(PREFIX)/bin/fedsim
	if [ -z "$(INSTALL_BIN)" ] && [ -x build/mpi/fedsim-mpi ]; then \
	    install -m 755 build/mpi/fedsim-mpi $(DESTDIR)$(PREFIX)/bin/fedsim-mpi; fi
	install -m 644 devices/catalog.yaml $(DATADIR)/devices/
	install -m 644 devices/traces/* $(DATADIR)/devices/traces/
	install -m 644 devices/phones/*.tsv devices/phones/README.md $(DATADIR)/devices/phones/
	install -m 644 scenarios/*.yaml scenarios/README.md $(DATADIR)/scenarios/

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/fedsim $(DESTDIR)$(PREFIX)/bin/fedsim-mpi
	rm -rf $(DATADIR)

# The MPI build is tried first (log: build/mpi.log); if Open MPI cannot be installed,
# tests/test_sim_mpi says so and skips (it fails if mpirun is there and fedsim-mpi is not).
test: deps
	-@mkdir -p build; $(MAKE) --no-print-directory mpi >build/mpi.log 2>&1 || \
	    { echo "make mpi failed (see build/mpi.log):"; tail -n 5 build/mpi.log; }
	@$(MAKE) --no-print-directory MODE=test run-tests

mpi: deps mpi-deps
	@$(MAKE) --no-print-directory MODE=mpi build-mpi

bench: deps
	@$(MAKE) --no-print-directory MODE=bench run-bench

check: deps
	@$(MAKE) --no-print-directory MODE=test check-format check-symbols check-layers check-style
	@$(MAKE) --no-print-directory test

# Install what is missing (we run as root on Debian; sudo is used when present otherwise).
deps mpi-deps fuzz-deps:
	@missing=""; for p in $(if $(filter mpi-deps,$@),$(DEPS_MPI_DEB),$(if $(filter fuzz-deps,$@),$(DEPS_FUZZ_DEB),$(DEPS_DEB))); do \
	    dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	    echo "deps: installing missing Debian packages:$$missing"; \
	    sudo=""; [ "$$(id -u)" -ne 0 ] && sudo=sudo; \
	    $$sudo apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq --no-install-recommends $$missing \
	        || { echo "deps: apt-get failed; install these by hand:$$missing"; exit 1; }; \
	fi

$(BUILD)/fedsim: $(CMD_OBJ) $(LIB_OBJ)
	$(SAY) LD $@
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^ $(DEPS_LIBS)
build-mpi: $(BUILD)/fedsim-mpi
$(BUILD)/fedsim-mpi: $(CMD_OBJ) $(MPI_SRC:%.c=$(BUILD)/%.o) $(LIB_OBJ)
	$(SAY) LD $@
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^ $(DEPS_LIBS)
$(BUILD)/tests/%: $(BUILD)/tests/%.o $(LIB_OBJ)
	$(SAY) LD $@
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^ $(DEPS_LIBS)
$(BUILD)/tests/fuzz/replay_%: $(BUILD)/tests/fuzz/fuzz_%.o $(BUILD)/tests/fuzz/replay.o $(LIB_OBJ)
	$(SAY) LD $@
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^ $(DEPS_LIBS)
$(BUILD)/%.o: %.c
	@mkdir -p $(@D)
	$(SAY) CC $(@:$(BUILD)/%=%)
	$(Q)$(CC) $(ALL_CFLAGS) $(EXTRA_CFLAGS) -MMD -MP -c $< -o $@

# The numerical suites (nn, algos) run a second time under other BLAS kernels (tests/run.sh),
# but for the one-epoch Fashion-MNIST run: it alone would double the pass's time, and its one
# numerical check, >= 85% accuracy, has 1.2 points to spare on all five kernels tried (issue 37).
NUM_BIN := $(filter-out %/test_nn_train_fmnist, \
             $(filter $(BUILD)/tests/test_nn_% $(BUILD)/tests/test_fl_%,$(TEST_BIN)))
run-tests: $(TEST_BIN) $(BUILD)/fedsim
	@OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 FEDSIM_BIN=$(BUILD)/fedsim \
	    FEDSIM_MPI_BIN=build/mpi/fedsim-mpi sh tests/run.sh $(TEST_BIN) -- $(NUM_BIN)

run-bench: $(BENCH_BIN) $(BUILD)/fedsim
	@for b in $(BENCH_BIN); do FEDSIM_BIN=$(BUILD)/fedsim $$b || exit 1; done

fuzz: deps fuzz-deps
	@$(MAKE) --no-print-directory MODE=fuzz run-fuzz

# Each target fuzzes for FUZZ_SECONDS on one core: new inputs go to a scratch folder, and those
# that reach new code are merged (-merge=1) into the committed corpus; a crash, leak, timeout or
# out-of-memory is written into the corpus itself (crash-*, leak-*, ...), so make test replays it
# until it is fixed. Logs: build/fuzz/<name>.log.
run-fuzz: $(FUZZ:%=$(BUILD)/tests/fuzz/fuzz_%)
	@bad=""; for n in $(FUZZ); do \
	    c=tests/fuzz/corpus/$$n; new=$(BUILD)/new/$$n; log=$(BUILD)/$$n.log; \
	    rm -rf $$new; mkdir -p $$c $$new; \
	    OPENBLAS_NUM_THREADS=1 $(BUILD)/tests/fuzz/fuzz_$$n -max_total_time=$(FUZZ_SECONDS) \
	        -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix=$$c/ \
	        $$new $$c >$$log 2>&1 || bad="$$bad $$n"; \
	    before=$$(ls $$c | wc -l); \
	    $(BUILD)/tests/fuzz/fuzz_$$n -merge=1 -artifact_prefix=$(BUILD)/ $$c $$new >>$$log 2>&1; \
	    runs=$$(grep -m 1 '^Done [0-9]* runs' $$log); \
	    cov=$$(grep -m 1 -E '^#[0-9]+[[:space:]]+DONE' $$log | sed 's/^.*DONE *//'); \
	    echo "fuzz $$n: $$runs; $$cov; corpus $$before -> $$(ls $$c | wc -l) files"; \
	    rm -rf $$new; \
	done; \
	if [ -n "$$bad" ]; then \
	    echo "fuzz: found a bug in:$$bad (see build/fuzz/<name>.log; the input is in its corpus)"; \
	    exit 1; \
	fi

SRC_ALL = $(wildcard sim/*.[ch] nn/*.[ch] devices/*.[ch] algos/*.[ch] plots/*.[ch] tests/*.[ch] tests/bench/*.[ch] tests/fuzz/*.[ch])
check-format:
	$(SAY) FMT "clang-format --dry-run on $(words $(SRC_ALL)) files"
	$(Q)clang-format --dry-run --Werror $(SRC_ALL)
format:
	clang-format -i $(SRC_ALL)

# Every exported symbol carries its folder's prefix (SQLite's checksymbols), the program's too
# (but main).
check-symbols: $(LIB_OBJ) $(CMD_OBJ)
	@bad=$$(nm -g --defined-only $(LIB_OBJ) $(CMD_OBJ) | awk 'NF==3{print $$3}' \
	   | grep -Ev '^(sim|nn|dev|fl|plot)_|^__odr_asan|^main$$' || true); \
	 if [ -n "$$bad" ]; then echo "unprefixed exports:"; echo "$$bad"; exit 1; fi

# Includes point downward; sim/base.h, keys.h, rng.h, units.h and yaml.h are leaves any layer may use.
# plots/ sits beside the engine (the fedsim program, CMD_SRC and cmd.h, wires them): it may use
# only base, units and yaml.
LEAF := sim/\(base\|keys\|rng\|units\|yaml\)\.h
PLOT_LEAF := sim/\(base\|units\|yaml\)\.h
check-layers:
	@if grep -n '#include "\(algos\|devices\|nn\)/' /dev/null $(wildcard plots/*.[ch]); then exit 1; fi
	@if grep -n '#include "sim/' /dev/null $(wildcard plots/*.[ch]) \
	    | grep -v '"$(PLOT_LEAF)"'; then echo "plots/ may include only sim/base.h, units.h, yaml.h"; exit 1; fi
	@if grep -n '#include "plots/' /dev/null $(wildcard nn/*.[ch] devices/*.[ch] algos/*.[ch] sim/*.[ch]) \
	    | grep -v '^sim/\(main\|cmd\|cmd_[a-z]*\)\.[ch]:'; then \
	    echo "only the fedsim program (sim/main.c, sim/cmd*.[ch]) uses plots/"; exit 1; fi
	@if grep -n '#include "\(algos\|devices\)/' /dev/null $(wildcard nn/*.[ch]); then exit 1; fi
	@if grep -n '#include "\(algos\|nn\)/' /dev/null $(wildcard devices/*.[ch]); then exit 1; fi
	@if grep -n '#include "sim/' /dev/null $(wildcard nn/*.[ch] devices/*.[ch] algos/*.[ch]) \
	    | grep -v '"$(LEAF)"'; then echo "only leaf sim/ headers below sim/"; exit 1; fi

check-style:
	@if grep -nE '\b(s?rand|random)\(|\bexit\(' /dev/null $(LIB_SRC); then \
	   echo "banned call in library code"; exit 1; fi

clean:
	rm -rf build

.SECONDARY:
-include $(wildcard $(BUILD)/*/*.d $(BUILD)/tests/*/*.d)
