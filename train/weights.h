/*
 * train/weights.h - weights interchange with the PyTorch ecosystem: exporting a
 * checkpoint as a safetensors file (`trainer --export`) and starting training
 * from one (`model.init_from`). The file format is in train/safetensors.h.
 */
#ifndef CNT_WEIGHTS_H
#define CNT_WEIGHTS_H

#include "model/net.h"

/* Rebuilds the checkpoint's net from the checkpoint alone (model name, input
 * shape, classes, aux_logits, ... of its version-2 header, through zoo_build on
 * the CPU backend), reads and validates the checkpoint, and writes its
 * parameters and batch-norm buffers to out_path as safetensors with
 * torchvision's names and shapes. num_batches_tracked holds the checkpoint's
 * optimizer step count. On success prints nothing; *n_tensors (may be NULL)
 * receives the number of tensors written.
 * Errors: CNT_ERR with a message naming ckpt_path (cannot open, not a
 * checkpoint, version 1, corrupt, a model this build cannot rebuild) or
 * out_path (cannot be written); out_path is then left as it was. */
int weights_export(const char *ckpt_path, const char *out_path, int *n_tensors);

/* Loads the safetensors file at path into nt's parameters and buffers (device
 * memory: downloaded, overwritten, uploaded) and logs one line with the
 * tensors loaded and the extra tensors ignored, and a warning when the
 * classifier keeps its random initialisation (another class count).
 * Errors: CNT_ERR with safetensors_load's message (naming path and tensor);
 * nt's parameters are then unchanged on the device. */
int weights_init_from(net *nt, const char *path);

#endif
