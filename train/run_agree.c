/*
 * train/run_agree.c - what every rank of a run must agree on (see
 * train/run.h): the same configuration and model before anything depends on
 * them, and the same parameters after every epoch.
 */
#include "train/run.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/hash.h"
#include "dist/dist.h"

/* The effective config as written to config.ini, plus the model's parameter
 * count: what every rank must agree on. Caller frees. */
char *run_config_text(const config *cfg, size_t n_params, size_t *len) {
    char *text = NULL;
    FILE *f = open_memstream(&text, len);
    CHECK_ERRNO(f != NULL, "open_memstream");
    config_write_ini(cfg, f);
    if (n_params) fprintf(f, "; model parameters %zu\n", n_params);
    fclose(f);
    return text;
}

/* After each epoch in a multi-rank job: every rank must hold bit-identical
 * parameters (they start from rank 0's and apply the same summed gradients).
 * A difference means a broken reduction or a nondeterministic update, and
 * training on would silently diverge: report the ranks and stop. */
int run_check_params_identical(const net *nt, float *host) {
    int world = dist_world();
    nt->be->download(host, nt->params, nt->n_params * sizeof(float));
    uint64_t h = hash_large(host, nt->n_params * sizeof(float));
    uint64_t *all = cnt_malloc((size_t)world * sizeof *all);
    dist_phase("post-epoch parameter check");
    dist_allgather_u64(h, all);
    int bad = -1;
    for (int r = 1; r < world && bad < 0; r++)
        if (all[r] != all[0]) bad = r;
    free(all);
    if (bad >= 0) return cnt_err_set("parameters on rank %d differ from rank 0's: the ranks have diverged", bad);
    return CNT_OK;
}

/* Hash of the effective configuration, stored in checkpoints. */
uint64_t run_config_hash(const config *cfg) {
    size_t len;
    char *text = run_config_text(cfg, 0, &len);
    uint64_t h = hash_bytes(text, len);
    free(text);
    return h;
}

/* Ranks must run the same configuration and model: compare a hash of the
 * effective config (as written to config.ini) and the parameter count
 * (n_params; 0 before the model exists). On a
 * mismatch, each differing rank names the first line that differs from rank
 * 0's config, and the job ends (a silent divergence or a hang is worse). */
int run_check_same_config(const config *cfg, size_t n_params) {
    int world = dist_world();
    if (world == 1) return CNT_OK;
    dist_phase("start-up: configuration check");
    size_t len;
    char *text = run_config_text(cfg, n_params, &len);
    uint64_t h = hash_bytes(text, len);
    uint64_t *all = cnt_malloc((size_t)world * sizeof *all);
    dist_allgather_u64(h, all);
    int same = 1;
    for (int r = 1; r < world; r++) same &= all[r] == all[0];
    free(all);
    if (same) {
        free(text);
        return CNT_OK;
    }
    /* Rank 0's text travels to every rank so each can say what differs. */
    uint64_t n0 = len;
    dist_broadcast(&n0, sizeof n0, 0);
    char *text0 = cnt_malloc(n0 + 1);
    if (dist_rank() == 0) memcpy(text0, text, n0);
    dist_broadcast(text0, n0, 0);
    text0[n0] = '\0';
    if (dist_rank() != 0) {
        const char *a = text0, *b = text;
        char section[64] = ""; /* "dist." while inside [dist]: the key is named whole */
        while (*a && *b) {
            const char *ea = strchr(a, '\n'), *eb = strchr(b, '\n');
            size_t la = ea ? (size_t)(ea - a) : strlen(a), lb = eb ? (size_t)(eb - b) : strlen(b);
            if (la != lb || memcmp(a, b, la) != 0) {
                const char *sec = b[0] == ';' ? "" : section;
                log_error("this rank's configuration differs from rank 0's: '%s%.*s' here, '%s%.*s' on rank 0", sec,
                          (int)lb, b, sec, (int)la, a);
                break;
            }
            if (b[0] == '[' && lb > 2 && b[lb - 1] == ']') snprintf(section, sizeof section, "%.*s.", (int)(lb - 2), b + 1);
            a += la + (ea ? 1 : 0);
            b += lb + (eb ? 1 : 0);
        }
    }
    free(text0);
    free(text);
    dist_barrier(); /* let every rank print before rank 0 reports and the job ends */
    return cnt_err_set("ranks run different configurations or models (see the lines from the differing ranks)");
}
