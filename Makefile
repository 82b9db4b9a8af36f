# cnntrain - build, test, benchmark.
#
#   make deps     install the Debian packages the project needs (idempotent)
#   make          build ./trainer (prints what optional parts were found)
#   make test     build and run every test; ends with "N passed, N failed"
#   make test-sanitize [SAN=thread]  tests under AddressSanitizer and UBSan, or ThreadSanitizer
#   make fuzz     the file readers under libFuzzer (clang)
#   make bench    CPU training throughput (docs/benchmarks.md)
#   make clean
#
#   make install PREFIX=DIR   bin/trainer, its tools, configs and docs under DIR
#
# Options: ONEDNN=0|1 (default: on when oneDNN 2.x is found; the CPU backend's
# blocked activation layout runs on it), CUDA=0|1 (default: on when the CUDA toolkit at CUDA_HOME is usable; the
# CUDA backend also needs cuDNN and cuBLAS, NCCL is used when found), MPI=0|1
# (default: on when $(MPICC) works), OPT="-O3 -march=native",
# NVCC_ARCH="-gencode ..." (default: Ampere and Hopper, plus PTX for newer GPUs).
# Where the libraries are (docs/install.md): CUDA_HOME (default /usr/local/cuda),
# CUDNN_HOME, NCCL_HOME, MPICC (default mpicc), ONEDNN_ROOT, OPENBLAS_ROOT (and OPENBLAS_LIB),
# JPEG_ROOT, JANSSON_ROOT, INIH_ROOT, STB_ROOT, ZLIB_ROOT, CMOCKA_ROOT: a prefix
# holding include/ and lib/ (or lib64/), as environment modules and NVIDIA's
# wheels lay them out; a library without its variable comes from pkg-config
# (PKG_CONFIG_PATH), else from the compiler's own paths (CPATH, LIBRARY_PATH).
# Libraries found outside the system's paths are linked with their directory as
# an rpath, so ./trainer runs without LD_LIBRARY_PATH.
# Optional parts are detected by compiling a probe, never by asking the package
# manager. A change of options rebuilds everything that depends on them.

SHELL := /bin/bash
# One job per CPU unless -j is given (make -j1 builds serially): `make test`
# on a fresh 2-core machine (CI) compiles in 50 s instead of 90.
# (A sub-make, as test-sanitize runs, shares its parent's jobs.)
ifeq ($(filter -j%,$(MAKEFLAGS))$(filter-out 0,$(MAKELEVEL)),)
MAKEFLAGS += -j$(shell nproc)
endif
CC ?= gcc
CUDA_HOME ?= /usr/local/cuda
MPICC ?= mpicc
OPT ?= -O3 -march=native
BUILD := build
PREFIX ?= /usr/local

DEB_PACKAGES := build-essential pkg-config zlib1g-dev libopenblas-openmp-dev libcmocka-dev \
  libdnnl-dev libstb-dev libjpeg-dev libinih-dev libjansson-dev libopenmpi-dev openmpi-bin dataset-fashion-mnist python3 \
  python3-matplotlib slurm-wlm munge

# ---------------------------------------------------------------- where the libraries are
# dep_flags ROOT LIB PKG: the compile and link flags of one library: from its
# prefix ROOT (include/, and lib64/ or lib/ holding libLIB.so; NVIDIA's
# wheels ship only libLIB.so.N, linked by that name), else pkg-config's for
# PKG, else -lLIB (the compiler's own paths).
lib_dir = $(if $(wildcard $(1)/lib64/lib$(2).so* $(1)/lib64/lib$(2).a),$(1)/lib64,$(1)/lib)
lib_flag = $(if $(wildcard $(1)/lib$(2).so $(1)/lib$(2).a),-l$(2),$(if $(wildcard $(1)/lib$(2).so.*),\
  -l:$(notdir $(firstword $(wildcard $(1)/lib$(2).so.*))),-l$(2)))
root_flags = -I$(1)/include -L$(call lib_dir,$(1),$(2)) -Wl,-rpath,$(call lib_dir,$(1),$(2)) \
  $(call lib_flag,$(call lib_dir,$(1),$(2)),$(2))
pc_flags = $(if $(1),$(shell pkg-config --exists $(1) 2>/dev/null && pkg-config --cflags --libs $(1)))
with_rpath = $(strip $(1) $(foreach d,$(patsubst -L%,%,$(filter -L%,$(1))),-Wl,-rpath,$(d)))
dep_flags = $(strip $(if $(1),$(call root_flags,$(1),$(2)),$(or $(call with_rpath,$(call pc_flags,$(3))),-l$(2))))
# Debian's OpenMP build of OpenBLAS (what `make deps` installs) before pkg-config's choice.
DEB_OPENBLAS := $(wildcard /usr/include/x86_64-linux-gnu/openblas-openmp)
# OPENBLAS_LIB: the library's name (RHEL's OpenMP build is openblaso).
OPENBLAS_LIB ?= openblas
BLAS_FLAGS := $(if $(OPENBLAS_ROOT),$(call root_flags,$(OPENBLAS_ROOT),$(OPENBLAS_LIB)) \
  $(if $(wildcard $(OPENBLAS_ROOT)/include/openblas/cblas.h),-I$(OPENBLAS_ROOT)/include/openblas),$(if \
  $(DEB_OPENBLAS),-I$(DEB_OPENBLAS) -l$(OPENBLAS_LIB),$(call dep_flags,,$(OPENBLAS_LIB),openblas)))
JANSSON_FLAGS := $(call dep_flags,$(JANSSON_ROOT),jansson,jansson)
JPEG_FLAGS := $(call dep_flags,$(JPEG_ROOT),jpeg,libjpeg)
INIH_FLAGS := $(call dep_flags,$(INIH_ROOT),inih,inih)
ZLIB_FLAGS := $(call dep_flags,$(ZLIB_ROOT),z,zlib)
CMOCKA_FLAGS := $(call dep_flags,$(CMOCKA_ROOT),cmocka,cmocka)
DNNL_FLAGS := $(call dep_flags,$(ONEDNN_ROOT),dnnl,dnnl)
# stb_image: Debian's libstb holds its implementation; elsewhere the headers
# alone (stb/stb_image.h and stb_image_write.h under STB_ROOT/include) and data/stb_image_impl.c compiles them.
STB_INC := $(if $(STB_ROOT),-I$(STB_ROOT)/include)
STB_FLAGS := $(if $(STB_ROOT),$(if $(wildcard $(STB_ROOT)/lib*/libstb.*),$(call root_flags,$(STB_ROOT),stb),\
  $(STB_INC)),$(call dep_flags,,stb,stb))
# NVIDIA's libraries: the toolkit's, unless CUDNN_HOME / NCCL_HOME name another (a wheel's nvidia/cudnn).
CUDNN_FLAGS := $(if $(CUDNN_HOME),$(call root_flags,$(CUDNN_HOME),cudnn),-lcudnn)
NCCL_FLAGS := $(if $(NCCL_HOME),$(call root_flags,$(NCCL_HOME),nccl),-lnccl)
# A list of libraries' flags split into the compiler's (-I) and the linker's, each in the list's order.
dep_cflags = $(filter -I%,$(1))
dep_libs = $(filter-out -I%,$(1))

# ---------------------------------------------------------------- probes
# Results are cached in build/probe.mk; `make clean` (or `make deps`, which
# may have installed something, or a change to probe.sh) re-probes. `make deps` and `make clean` run
# without probing, so they work on a machine that has nothing installed yet.
PROBE_MK := $(BUILD)/probe.mk
CUDA_INC := -I$(CUDA_HOME)/include
CUDA_LIB := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64
# nvJPEG (data.decoder = nvjpeg): the toolkit's, or the one `make deps`
# unpacked into deps/nvjpeg where the toolkit lacks it (tools/fetch_nvjpeg.sh).
NVJPEG_HOME ?= $(if $(wildcard $(CUDA_HOME)/include/nvjpeg.h),$(CUDA_HOME),$(CURDIR)/deps/nvjpeg)
NVJPEG_LIBDIR := $(if $(wildcard $(NVJPEG_HOME)/lib64),$(NVJPEG_HOME)/lib64,$(NVJPEG_HOME)/lib)
NEEDS_BUILD := $(filter-out deps clean,$(or $(MAKECMDGOALS),all))
# What the probes see; a change of any of it (a module loaded, a ROOT set) probes again.
PROBE_ENV := CC='$(CC)' CUDA_HOME='$(CUDA_HOME)' NVJPEG_HOME='$(NVJPEG_HOME)' MPICC='$(MPICC)' \
  BLAS_FLAGS='$(BLAS_FLAGS)' JANSSON_FLAGS='$(JANSSON_FLAGS)' JPEG_FLAGS='$(JPEG_FLAGS)' \
  INIH_FLAGS='$(INIH_FLAGS)' ZLIB_FLAGS='$(ZLIB_FLAGS)' STB_FLAGS='$(STB_FLAGS)' DNNL_FLAGS='$(DNNL_FLAGS)' \
  CUDNN_FLAGS='$(CUDNN_FLAGS)' NCCL_FLAGS='$(NCCL_FLAGS)' CMOCKA_FLAGS='$(CMOCKA_FLAGS)'
PROBE_SIG := $(shell echo "$(PROBE_ENV) $$CPATH $$LIBRARY_PATH" | md5sum | cut -c1-16)
ifneq ($(NEEDS_BUILD),)
# A prefix named on purpose must be one: a mistyped path is not quietly replaced by the system's library.
ROOT_VARS := CUDNN_HOME NCCL_HOME ONEDNN_ROOT OPENBLAS_ROOT JPEG_ROOT JANSSON_ROOT INIH_ROOT STB_ROOT ZLIB_ROOT \
  CMOCKA_ROOT
$(foreach v,$(ROOT_VARS),$(if $($(v)),$(if $(wildcard $($(v))/include),,$(error $(v)=$($(v)): no include/ \
  folder there (a prefix holding include/ and lib/ or lib64/ is expected; docs/install.md)))))
$(shell mkdir -p $(BUILD); [ -s $(PROBE_MK) -a $(PROBE_MK) -nt tools/probes/probe.sh ] && \
  grep -qx '# $(PROBE_SIG)' $(PROBE_MK) || \
  { echo '# $(PROBE_SIG)'; env $(PROBE_ENV) tools/probes/probe.sh; } > $(PROBE_MK))
include $(PROBE_MK)
CUDA_USABLE := $(if $(filter 1,$(HAVE_CUDART)),$(if $(filter 1,$(HAVE_NVCC)),1,0),0)
CUDA ?= $(CUDA_USABLE)
MPI ?= $(HAVE_MPI)
ONEDNN ?= $(HAVE_DNNL)
ifeq ($(ONEDNN),1)
  ifneq ($(HAVE_DNNL),1)
    $(error ONEDNN=1 but oneDNN 2.x (dnnl.h, libdnnl) was not found: run `make deps`, or set ONEDNN_ROOT)
  endif
endif
ifeq ($(HAVE_BLAS),0)
  $(shell rm -f $(PROBE_MK))
  $(error OpenBLAS (cblas.h, libopenblas) not found: run `make deps`)
endif
ifeq ($(HAVE_JANSSON),0)
  $(shell rm -f $(PROBE_MK))
  $(error jansson 2.8 or later (jansson.h, libjansson), the JSON reader, not found: run `make deps`, or set \
    JANSSON_ROOT or PKG_CONFIG_PATH (docs/install.md))
endif
ifeq ($(HAVE_JPEG),0)
  $(shell rm -f $(PROBE_MK))
  $(error libjpeg-turbo 1.5 or later (jpeglib.h, libjpeg), the JPEG decoder, not found: run `make deps`, or set \
    JPEG_ROOT or PKG_CONFIG_PATH (docs/install.md))
endif
ifeq ($(HAVE_INIH),0)
  $(shell rm -f $(PROBE_MK))
  $(error inih (ini.h, libinih), the config file reader, not found: run `make deps`, or set INIH_ROOT or \
    PKG_CONFIG_PATH (docs/install.md))
endif
ifeq ($(HAVE_STB),0)
  $(shell rm -f $(PROBE_MK))
  $(error stb_image (stb/stb_image.h and stb/stb_image_write.h), the PNG/BMP/GIF reader, not found: run \
    `make deps`, or set STB_ROOT (docs/install.md))
endif
ifeq ($(HAVE_ZLIB),0)
  $(shell rm -f $(PROBE_MK))
  $(error zlib (zlib.h, libz) not found: run `make deps`, or set ZLIB_ROOT or PKG_CONFIG_PATH (docs/install.md))
endif
ifeq ($(CUDA),1)
  ifneq ($(CUDA_USABLE),1)
    $(error CUDA=1 but no usable CUDA toolkit at $(CUDA_HOME) (nvcc, cuda_runtime.h, libcudart))
  endif
endif
# The CUDA backend: the toolkit, cuDNN and cuBLAS; NCCL on top when MPI is on.
CUDA_BACKEND := $(if $(filter 1,$(CUDA)),$(if $(filter 1,$(HAVE_CUDNN)),$(if $(filter 1,$(HAVE_CUBLAS)),1,0),0),0)
NCCL := $(if $(filter 1,$(CUDA_BACKEND)),$(if $(filter 1,$(MPI)),$(HAVE_NCCL),0),0)
NVJPEG := $(if $(filter 1,$(CUDA_BACKEND)),$(HAVE_NVJPEG),0)
endif

comma := ,
mark = $(if $(filter 1,$(1)),✓,✗)
from = $(if $(1), from $(1))

# ---------------------------------------------------------------- flags
# The libraries every build links (the optional ones are added below).
BASE_DEPS := $(BLAS_FLAGS) $(INIH_FLAGS) $(STB_FLAGS) $(JPEG_FLAGS) $(JANSSON_FLAGS) $(ZLIB_FLAGS)
CFLAGS := -std=c11 -D_GNU_SOURCE $(OPT) -ffp-contract=off -g -Wall -Wextra -Wshadow -Wpointer-arith -fopenmp -I. \
  $(call dep_cflags,$(BASE_DEPS)) -MMD -MP
LDLIBS := $(call dep_libs,$(BASE_DEPS)) -lm -lpthread -fopenmp
CONFIG_DEFS := -DCNT_HAVE_ONEDNN=$(ONEDNN) -DCNT_HAVE_CUDA=$(CUDA) -DCNT_HAVE_MPI=$(MPI) -DCNT_HAVE_CUDA_BACKEND=$(CUDA_BACKEND) \
  -DCNT_HAVE_NCCL=$(NCCL) -DCNT_HAVE_NVJPEG=$(NVJPEG)
CFLAGS += $(CONFIG_DEFS)
NVCC := $(CUDA_HOME)/bin/nvcc
# sm_80 (A100), sm_90 (H100/H200) as machine code, compute_90 as PTX that the
# driver compiles for newer GPUs.
NVCC_ARCH ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
  -gencode arch=compute_90,code=compute_90
NVCCFLAGS := -O3 -std=c++17 -g -I. $(CONFIG_DEFS) $(NVCC_ARCH) -Xcompiler -Wall,-Wextra -MMD -MP
ifeq ($(ONEDNN),1)
  CFLAGS += $(call dep_cflags,$(DNNL_FLAGS))
  LDLIBS += $(call dep_libs,$(DNNL_FLAGS))
endif
ifeq ($(CUDA_BACKEND),1)
  # cuDNN's and NCCL's own prefixes first: a wheel's cudnn.h, not the toolkit's
  NV_DEPS := $(CUDNN_FLAGS) $(if $(filter 1,$(NCCL)),$(NCCL_FLAGS))
  CFLAGS += $(call dep_cflags,$(NV_DEPS)) $(CUDA_INC)
  LDLIBS += $(call dep_libs,$(NV_DEPS)) $(CUDA_LIB) -lcublas -lcudart -lstdc++
  ifeq ($(NVJPEG),1)
    CFLAGS += -I$(NVJPEG_HOME)/include
    LDLIBS += -L$(NVJPEG_LIBDIR) -Wl,-rpath,$(NVJPEG_LIBDIR) -lnvjpeg
    # the copy `make install` puts beside an installed trainer, where the source tree may be gone
    LDLIBS += $(if $(filter $(CURDIR)/deps/%,$(NVJPEG_HOME)),-Wl$(comma)-rpath$(comma)'$$ORIGIN/../lib/cnntrain')
  endif
endif
ifeq ($(MPI),1)
  # The MPI wrapper tells its own flags (Open MPI: --showme, MPICH and Intel MPI: -show); only dist/ includes mpi.h.
  MPI_SHOW := $(or $(shell $(MPICC) --showme:compile 2>/dev/null),$(filter -I% -D% -pthread,$(shell $(MPICC) -show \
    2>/dev/null)))
  CFLAGS += $(MPI_SHOW)
  LDLIBS += $(or $(shell $(MPICC) --showme:link 2>/dev/null),$(filter -L% -l% -Wl% -pthread,$(shell $(MPICC) -show \
    2>/dev/null)))
endif
# stb_image without Debian's libstb: its implementation compiled here.
STB_IMPL := $(if $(filter 1,$(HAVE_LIBSTB)),0,1)
CFLAGS += -DCNT_STB_IMPL=$(STB_IMPL)

# Every option that changes the build goes into this file; objects depend on it.
BUILD_SIG := CC=$(CC) OPT=$(OPT) ONEDNN=$(ONEDNN) CUDA=$(CUDA) MPI=$(MPI) CUDA_BACKEND=$(CUDA_BACKEND) NCCL=$(NCCL) \
  NVJPEG=$(NVJPEG) NVCC_ARCH=$(NVCC_ARCH) PROBE=$(PROBE_SIG) LINK=$(shell echo '$(LDLIBS)' | md5sum | cut -c1-16)
ifneq ($(NEEDS_BUILD),)
$(shell mkdir -p $(BUILD); [ "$$(cat $(BUILD)/config.sig 2>/dev/null)" = "$(BUILD_SIG)" ] || echo "$(BUILD_SIG)" > $(BUILD)/config.sig)
endif

# ---------------------------------------------------------------- sources
LIB_SRC := $(wildcard common/*.c model/*.c data/*.c dist/*.c train/*.c)
LIB_SRC := $(filter-out train/main.c,$(LIB_SRC))
# The CUDA backend's sources: host code in C (gcc), kernels in .cu (nvcc).
CUDA_SRC := model/backend_cuda.c model/cudnn_graph.c
CU_SRC := $(wildcard model/*.cu)
# The oneDNN part of the CPU backend (the blocked layout).
ONEDNN_SRC := model/backend_onednn.c
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/%.o)
ifeq ($(CUDA_BACKEND),1)
  LIB_OBJ += $(CU_SRC:%.cu=$(BUILD)/%.o)
else
  LIB_OBJ := $(filter-out $(CUDA_SRC:%.c=$(BUILD)/%.o),$(LIB_OBJ))
endif
ifneq ($(ONEDNN),1)
  LIB_OBJ := $(filter-out $(ONEDNN_SRC:%.c=$(BUILD)/%.o),$(LIB_OBJ))
endif
LIB := $(BUILD)/libcnntrain.a

TEST_SUPPORT_SRC := $(wildcard tests/support/*.c)
TEST_SUPPORT_OBJ := $(TEST_SUPPORT_SRC:%.c=$(BUILD)/%.o)
TEST_SRC := $(wildcard tests/test_*.c)
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
TEST_SCRIPTS := $(wildcard tests/test_*.sh)
# Programs run under mpirun by the integration scripts (not run directly).
MPI_TEST_SRC := $(wildcard tests/mpi_*.c)
MPI_TEST_BIN := $(MPI_TEST_SRC:tests/%.c=$(BUILD)/tests/%)

# Programs beside the trainer (tools/*.c, built to build/tools/). bench_onednn
# (oneDNN's convolutions against ours, docs/benchmarks.md) needs oneDNN.
TOOL_SRC := $(filter-out tools/bench_onednn.c,$(wildcard tools/*.c))
ifeq ($(ONEDNN),1)
  TOOL_SRC += tools/bench_onednn.c
endif
TOOL_BIN := $(TOOL_SRC:tools/%.c=$(BUILD)/tools/%)
# What this GPU's cuDNN offers the 16-bit and fused paths (run on a GPU by tools/dev/gpu_check.sh).
ifeq ($(CUDA_BACKEND),1)
  TOOL_BIN += $(BUILD)/tools/cudnn_caps
endif

.PHONY: all deps test test-unit test-build test-sanitize sanitized-tests fuzz fuzzers bench clean found install
$(TEST_SUPPORT_OBJ): CFLAGS += $(call dep_cflags,$(CMOCKA_FLAGS))
# Test support objects are prerequisites of pattern rules only; keep them.
.SECONDARY: $(TEST_SUPPORT_OBJ)
all: found trainer $(TOOL_BIN)

found:
	@echo "cnntrain build configuration:"
	@echo "  $(call mark,$(HAVE_BLAS)) OpenBLAS (CPU math library)$(call from,$(OPENBLAS_ROOT))"
	@echo "  $(call mark,$(HAVE_JANSSON)) jansson (JSON reader)$(call from,$(JANSSON_ROOT))"
	@echo "  $(call mark,$(HAVE_JPEG)) libjpeg-turbo (JPEG decoder)$(call from,$(JPEG_ROOT))"
	@echo "  $(call mark,$(HAVE_INIH)) inih (config reader)$(call from,$(INIH_ROOT))"
	@echo "  $(call mark,$(HAVE_STB)) stb_image (PNG, BMP, GIF)$(call from,$(STB_ROOT))$(if \
	  $(filter 1,$(STB_IMPL)), - compiled here from its header)"
	@echo "  $(call mark,$(HAVE_ZLIB)) zlib$(call from,$(ZLIB_ROOT))"
	@echo "  $(call mark,$(HAVE_DNNL)) oneDNN 2.x (CPU blocked layout)$(call from,$(ONEDNN_ROOT))$(if \
	  $(filter 0,$(ONEDNN)), - not used)"
	@echo "  $(call mark,$(HAVE_MPI)) MPI ($(MPICC))$(if $(filter 0,$(MPI)), - not used)"
	@echo "  $(call mark,$(CUDA_USABLE)) CUDA toolkit ($(CUDA_HOME))$(if $(filter 1,$(CUDA)),, - not used)"
	@echo "  $(call mark,$(HAVE_CUDNN)) cuDNN$(call from,$(CUDNN_HOME))"
	@echo "  $(call mark,$(HAVE_CUBLAS)) cuBLAS"
	@echo "  $(call mark,$(HAVE_NCCL)) NCCL$(call from,$(NCCL_HOME))"
	@echo "  $(call mark,$(CUDA_BACKEND)) CUDA backend (toolkit + cuDNN + cuBLAS)$(if $(filter 1,$(NCCL)), with NCCL,)"
	@echo "  $(call mark,$(NVJPEG)) nvJPEG (data.decoder = nvjpeg)$(if $(filter 1,$(NVJPEG)), from \
	  $(patsubst $(CURDIR)/%,%,$(NVJPEG_HOME)),)"

$(BUILD)/%.o: %.c $(BUILD)/config.sig
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/%.o: %.cu $(BUILD)/config.sig
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

$(LIB): $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

# ./trainer, and $(BUILD)/trainer: the same link, for builds beside the normal
# one (the sanitized tests'), which must not overwrite ./trainer
trainer $(BUILD)/trainer: $(BUILD)/train/main.o $(LIB)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/tests/%: tests/%.c $(TEST_SUPPORT_OBJ) $(LIB) $(BUILD)/config.sig
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(call dep_cflags,$(CMOCKA_FLAGS)) -o $@ $< $(TEST_SUPPORT_OBJ) $(LIB) $(LDLIBS) \
	  $(call dep_libs,$(CMOCKA_FLAGS))

$(BUILD)/tools/%: tools/%.c $(LIB) $(BUILD)/config.sig
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LIB) $(LDLIBS)

$(BUILD)/tools/cudnn_caps: tools/probes/cudnn_caps.c $(LIB) $(BUILD)/config.sig
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LIB) $(LDLIBS)


$(BUILD)/tests/mpi_%: tests/mpi_%.c $(TEST_SUPPORT_OBJ) $(LIB) $(BUILD)/config.sig
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(call dep_cflags,$(CMOCKA_FLAGS)) -o $@ $< $(TEST_SUPPORT_OBJ) $(LIB) $(LDLIBS) \
	  $(call dep_libs,$(CMOCKA_FLAGS))

# Everything `make test` runs, built and not run (tools/dev/device_kit.sh packs it).
test-build: trainer $(TOOL_BIN) $(TEST_BIN) $(MPI_TEST_BIN)

# Side by side (tests/run_tests.sh --side-by-side): tests that leave a core
# idle, two at a time, in two groups. First test_resume's single-threaded
# runs, then the unit tests that take about one core, beside the scripts
# that wait on Slurm's scheduler and on shaped links; then test_dist_train
# (ranks asleep in its stall cases) beside the scripts that sleep through
# emulated compute or check files, not times. Alone, after them: test_train
# (its OpenMP threads on every core), test_wait (it times its waits), and
# the rest (test_ps compares its ranks' clocks to 5 ms; test_dist, a spinning
# rank's share of a core to a sleeping one's).
TEST_GROUP1_A := tests/test_resume.sh $(filter-out $(BUILD)/tests/test_train $(BUILD)/tests/test_wait,$(TEST_BIN))
TEST_GROUP1_B := tests/test_slurm.sh tests/test_multihost.sh
TEST_GROUP2_A := tests/test_dist_train.sh
TEST_GROUP2_B := $(addprefix tests/test_,bench_ps.sh emulate.sh imagefolder.sh files.sh validate.sh shards.sh \
  simulate.sh plots.sh bench_jpeg_train.sh best.sh)
TEST_SIDE := $(TEST_GROUP1_A) $(TEST_GROUP1_B) $(TEST_GROUP2_A) $(TEST_GROUP2_B)
test: test-build
	@./trainer --devices | tests/gpu_line.sh
	@tests/run_tests.sh --side-by-side "$(TEST_GROUP1_A)" "$(TEST_GROUP1_B)" \
	  --side-by-side "$(TEST_GROUP2_A)" "$(TEST_GROUP2_B)" $(filter-out $(TEST_SIDE),$(TEST_BIN) $(TEST_SCRIPTS))

# The cmocka unit tests alone (no mpirun, no namespaces): a few minutes.
test-unit: test-build
	@tests/run_tests.sh $(TEST_BIN)

# The tests under a sanitizer, built in build-san-$(SAN)/ beside the normal
# build, CPU code only (CUDA=0), then tests/san_dist.sh (mpi_ring and the
# trainer in 2 ranks: the threads of a distributed run). SAN=address
# (default): AddressSanitizer and UndefinedBehaviorSanitizer, leaks included,
# every report fatal, on every cmocka unit test; SAN=thread:
# ThreadSanitizer, on the unit tests that start threads (loaders, the
# exchange, the stager, the stall monitor, parallel initialisation). About
# 12 and 6 minutes on 2 cores (docs/testing.md).
SAN ?= address
SAN_FLAGS_address := -fsanitize=address,undefined -fno-sanitize-recover=all
SAN_FLAGS_thread := -fsanitize=thread
SAN_TESTS_address = $(TEST_BIN)
SAN_TESTS_thread = $(addprefix $(BUILD)/tests/test_,data image imagefolder shards reducer exchange stager wait net \
  accumulate powersgd)
# (history_size=7: the earlier access's stack restored, which the suppressions need)
SAN_OPTIONS := ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS=suppressions=$(CURDIR)/tests/support/lsan.supp \
  UBSAN_OPTIONS=print_stacktrace=1 TSAN_OPTIONS='suppressions=$(CURDIR)/tests/support/sanitizers.supp \
  halt_on_error=0 exitcode=66 history_size=7'
test-sanitize:
	$(if $(SAN_FLAGS_$(SAN)),,$(error SAN=$(SAN): address or thread))
	@$(MAKE) --no-print-directory BUILD=build-san-$(SAN) CUDA=0 SAN=$(SAN) OPT="-O1 -g -fno-omit-frame-pointer \
	  $(SAN_FLAGS_$(SAN))" sanitized-tests
# OMP_THREAD_LIMIT=1 under ThreadSanitizer: libgomp is not built with it, so
# every access in a parallel region of more than one thread reads as a race
# it must suppress one by one (test_powersgd's teams of 2 and 3 took minutes
# a step); our own threads are what it checks
sanitized-tests: $(SAN_TESTS_$(SAN)) $(MPI_TEST_BIN) $(BUILD)/trainer $(BUILD)/tools/to_imagefolder
	@$(SAN_OPTIONS) OMP_NUM_THREADS=1 $(if $(filter thread,$(SAN)),OMP_THREAD_LIMIT=1) CNT_SAN_BUILD=$(BUILD) \
	  tests/run_tests.sh $(SAN_TESTS_$(SAN)) tests/san_dist.sh

# The file readers under libFuzzer (tests/fuzz_readers.c: images, safetensors,
# checkpoints, profiles, shard indexes, listings, configs, IDX files) with
# AddressSanitizer and UBSan, built by clang in build-fuzz/; FUZZ_SECONDS
# (default 60) each, from seeds the tools and a short run write
# (tests/run_fuzz.sh). Needs clang (Debian's clang package). -O1 leaves
# clang's vectorizer off, so the `omp simd` loops' "not vectorized" notes
# (-Wpass-failed) say nothing about the -O3 build and are silenced here.
FUZZ_TARGETS := image safetensors checkpoint profile shards listing config idx
FUZZ_SECONDS ?= 60
fuzz:
	@$(MAKE) --no-print-directory CC=clang BUILD=build-fuzz CUDA=0 MPI=0 OPT="-O1 -g -fno-omit-frame-pointer \
	  -Wno-pass-failed -fsanitize=address,undefined,fuzzer-no-link" fuzzers
FUZZ_BIN = $(FUZZ_TARGETS:%=$(BUILD)/fuzz/%)
fuzzers: $(FUZZ_BIN) $(BUILD)/trainer $(BUILD)/tools/to_imagefolder $(BUILD)/tools/make_shards
	@FUZZ_SECONDS=$(FUZZ_SECONDS) tests/run_fuzz.sh $(BUILD) $(FUZZ_TARGETS)
# (a static pattern: the .d files beside the programs are not programs)
$(FUZZ_BIN): $(BUILD)/fuzz/%: tests/fuzz_readers.c $(LIB) $(BUILD)/config.sig
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -fsanitize=fuzzer -DFUZZ_$*=1 -o $@ $< $(LIB) $(LDLIBS)

bench: trainer
	@tools/bench_cpu.sh

deps:
	apt-get update -q
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q $(DEB_PACKAGES)
	tools/fetch_nvjpeg.sh "$(CUDA_HOME)" deps/nvjpeg || echo "make deps: nvJPEG left out (data.decoder = nvjpeg unavailable)"
	rm -f $(PROBE_MK)

# A build for a cluster's shared file system, without root: make install PREFIX=$$HOME/.local
# (bin/trainer; the programs beside it in libexec/cnntrain; configs and docs in share/).
# DESTDIR stages the tree for a package.
INSTALL_DIR := $(DESTDIR)$(PREFIX)
install: all
	install -d $(INSTALL_DIR)/bin $(INSTALL_DIR)/libexec/cnntrain $(INSTALL_DIR)/share/cnntrain/configs \
	  $(INSTALL_DIR)/share/doc/cnntrain
	install -m 755 trainer $(INSTALL_DIR)/bin/trainer
	install -m 755 $(TOOL_BIN) $(INSTALL_DIR)/libexec/cnntrain/
	install -m 644 configs/*.ini $(INSTALL_DIR)/share/cnntrain/configs/
	install -m 644 README.md $(wildcard docs/*.md) $(INSTALL_DIR)/share/doc/cnntrain/
	$(if $(filter 1,$(NVJPEG)),$(if $(filter $(CURDIR)/deps/%,$(NVJPEG_HOME)),install -d $(INSTALL_DIR)/lib/cnntrain && \
	  cp -P $(NVJPEG_LIBDIR)/libnvjpeg.so* $(INSTALL_DIR)/lib/cnntrain/))
	@echo "installed in $(INSTALL_DIR): $(INSTALL_DIR)/bin/trainer $(INSTALL_DIR)/share/cnntrain/configs/..."

clean:
	rm -rf $(BUILD) build-san-* build-fuzz trainer

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
