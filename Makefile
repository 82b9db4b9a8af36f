# cnntrain - build, test, benchmark.
#
#   make deps     install the Debian packages the project needs (idempotent)
#   make          build ./trainer (prints what optional parts were found)
#   make test     build and run every test; ends with "N passed, N failed"
#   make bench    CPU training throughput (docs/benchmarks.md)
#   make clean
#
# Options: ONEDNN=0|1 (default: on when oneDNN 2.x is found; the CPU backend's
# blocked activation layout runs on it), CUDA=0|1 (default: on when /usr/local/cuda is usable; the CUDA
# backend also needs cuDNN and cuBLAS, NCCL is used when found), MPI=0|1
# (default: on when mpicc works), OPT="-O3 -march=native",
# NVCC_ARCH="-gencode ..." (default: Ampere and Hopper, plus PTX for newer GPUs).
# Optional parts are detected by compiling a probe, never by asking the package
# manager. A change of options rebuilds everything that depends on them.

SHELL := /bin/bash
# One job per CPU unless -j is given (make -j1 builds serially): `make test`
# on a fresh 2-core machine (CI) compiles in 50 s instead of 90.
ifeq ($(filter -j%,$(MAKEFLAGS)),)
MAKEFLAGS += -j$(shell nproc)
endif
CC ?= gcc
CUDA_HOME ?= /usr/local/cuda
OPT ?= -O3 -march=native
BUILD := build

DEB_PACKAGES := build-essential pkg-config zlib1g-dev libopenblas-openmp-dev libcmocka-dev \
  libdnnl-dev libstb-dev libjpeg-dev libinih-dev libjansson-dev libopenmpi-dev openmpi-bin dataset-fashion-mnist python3 \
  python3-matplotlib slurm-wlm munge

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
ifneq ($(NEEDS_BUILD),)
$(shell mkdir -p $(BUILD); [ -s $(PROBE_MK) -a $(PROBE_MK) -nt tools/probes/probe.sh ] || tools/probes/probe.sh "$(CC)" "$(CUDA_HOME)" "$(NVJPEG_HOME)" > $(PROBE_MK))
include $(PROBE_MK)
CUDA_USABLE := $(if $(filter 1,$(HAVE_CUDART)),$(if $(filter 1,$(HAVE_NVCC)),1,0),0)
CUDA ?= $(CUDA_USABLE)
MPI ?= $(HAVE_MPI)
ONEDNN ?= $(HAVE_DNNL)
ifeq ($(ONEDNN),1)
  ifneq ($(HAVE_DNNL),1)
    $(error ONEDNN=1 but oneDNN 2.x (dnnl.h, libdnnl) was not found: run `make deps`)
  endif
endif
ifeq ($(HAVE_BLAS),0)
  $(shell rm -f $(PROBE_MK))
  $(error OpenBLAS (cblas.h, libopenblas) not found: run `make deps`)
endif
ifeq ($(HAVE_JANSSON),0)
  $(shell rm -f $(PROBE_MK))
  $(error jansson 2.8 or later (jansson.h, libjansson), the JSON reader, not found: run `make deps`)
endif
ifeq ($(HAVE_JPEG),0)
  $(shell rm -f $(PROBE_MK))
  $(error libjpeg-turbo 1.5 or later (jpeglib.h, libjpeg), the JPEG decoder, not found: run `make deps`)
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

mark = $(if $(filter 1,$(1)),✓,✗)

# ---------------------------------------------------------------- flags
CFLAGS := -std=c11 -D_GNU_SOURCE $(OPT) -ffp-contract=off -g -Wall -Wextra -Wshadow -Wpointer-arith -fopenmp -I. \
  -I/usr/include/x86_64-linux-gnu/openblas-openmp -MMD -MP
LDLIBS := -lopenblas -linih -lstb -ljpeg -ljansson -lz -lm -lpthread -fopenmp
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
  LDLIBS += -ldnnl
endif
ifeq ($(CUDA_BACKEND),1)
  CFLAGS += $(CUDA_INC)
  LDLIBS += $(CUDA_LIB) -lcudnn -lcublas -lcudart -lstdc++
  ifeq ($(NCCL),1)
    LDLIBS += -lnccl
  endif
  ifeq ($(NVJPEG),1)
    CFLAGS += -I$(NVJPEG_HOME)/include
    LDLIBS += -L$(NVJPEG_LIBDIR) -Wl,-rpath,$(NVJPEG_LIBDIR) -lnvjpeg
  endif
endif
ifeq ($(MPI),1)
  # Open MPI's wrapper tells its own flags; only dist/ includes mpi.h.
  CFLAGS += $(shell mpicc --showme:compile)
  LDLIBS += $(shell mpicc --showme:link)
endif

# Every option that changes the build goes into this file; objects depend on it.
BUILD_SIG := CC=$(CC) OPT=$(OPT) ONEDNN=$(ONEDNN) CUDA=$(CUDA) MPI=$(MPI) CUDA_BACKEND=$(CUDA_BACKEND) NCCL=$(NCCL) \
  NVJPEG=$(NVJPEG) NVCC_ARCH=$(NVCC_ARCH)
ifneq ($(NEEDS_BUILD),)
$(shell mkdir -p $(BUILD); [ "$$(cat $(BUILD)/config.sig 2>/dev/null)" = "$(BUILD_SIG)" ] || echo "$(BUILD_SIG)" > $(BUILD)/config.sig)
endif

# ---------------------------------------------------------------- sources
LIB_SRC := $(wildcard common/*.c model/*.c data/*.c dist/*.c train/*.c)
LIB_SRC := $(filter-out train/main.c,$(LIB_SRC))
# The CUDA backend's sources: host code in C (gcc), kernels in .cu (nvcc).
CUDA_SRC := model/backend_cuda.c
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

.PHONY: all deps test test-unit test-build bench clean found
# Test support objects are prerequisites of pattern rules only; keep them.
.SECONDARY: $(TEST_SUPPORT_OBJ)
all: found trainer $(TOOL_BIN)

found:
	@echo "cnntrain build configuration:"
	@echo "  $(call mark,$(HAVE_BLAS)) OpenBLAS (CPU math library)"
	@echo "  $(call mark,$(HAVE_JANSSON)) jansson (JSON reader)"
	@echo "  $(call mark,$(HAVE_DNNL)) oneDNN 2.x (CPU blocked layout)$(if $(filter 0,$(ONEDNN)), - not used)"
	@echo "  $(call mark,$(HAVE_MPI)) MPI (mpicc)$(if $(filter 0,$(MPI)), - not used)"
	@echo "  $(call mark,$(CUDA_USABLE)) CUDA toolkit ($(CUDA_HOME))$(if $(filter 1,$(CUDA)),, - not used)"
	@echo "  $(call mark,$(HAVE_CUDNN)) cuDNN"
	@echo "  $(call mark,$(HAVE_CUBLAS)) cuBLAS"
	@echo "  $(call mark,$(HAVE_NCCL)) NCCL"
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

trainer: $(BUILD)/train/main.o $(LIB)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/tests/%: tests/%.c $(TEST_SUPPORT_OBJ) $(LIB) $(BUILD)/config.sig
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(TEST_SUPPORT_OBJ) $(LIB) $(LDLIBS) -lcmocka

$(BUILD)/tools/%: tools/%.c $(LIB) $(BUILD)/config.sig
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LIB) $(LDLIBS)

$(BUILD)/tools/cudnn_caps: tools/probes/cudnn_caps.c $(BUILD)/config.sig
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LDLIBS)


$(BUILD)/tests/mpi_%: tests/mpi_%.c $(TEST_SUPPORT_OBJ) $(LIB) $(BUILD)/config.sig
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(TEST_SUPPORT_OBJ) $(LIB) $(LDLIBS) -lcmocka

# Everything `make test` runs, built and not run (tools/dev/device_kit.sh packs it).
test-build: trainer $(TOOL_BIN) $(TEST_BIN) $(MPI_TEST_BIN)

test: test-build
	@./trainer --devices | tests/gpu_line.sh
	@tests/run_tests.sh $(TEST_BIN) $(TEST_SCRIPTS)

# The cmocka unit tests alone (no mpirun, no namespaces): a few minutes.
test-unit: test-build
	@tests/run_tests.sh $(TEST_BIN)

bench: trainer
	@tools/bench_cpu.sh

deps:
	apt-get update -q
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q $(DEB_PACKAGES)
	tools/fetch_nvjpeg.sh "$(CUDA_HOME)" deps/nvjpeg || echo "make deps: nvJPEG left out (data.decoder = nvjpeg unavailable)"
	rm -f $(PROBE_MK)

clean:
	rm -rf $(BUILD) trainer

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
