/*
 * train/run_files.c - a run's files in train.out_dir (see train/run.h): the
 * lock that keeps a second run out, config.ini, the run record that opens
 * metrics.jsonl, and where checkpoint.resume reads from.
 */
#include "train/run.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <omp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "common/check.h"
#include "common/fileio.h"
#include "dist/dist.h"
#include "dist/timeline.h"
#include "train/checkpoint.h"
#include "train/metrics.h"

/* A path from the config (checkpoint.dir, dist.timeline), resolved inside
 * train.out_dir when relative. */
void run_path_in_out_dir(const config *cfg, const char *path, char *out, size_t len) {
    if (path[0] == '/') snprintf(out, len, "%s", path);
    else snprintf(out, len, "%s/%s", cfg->out_dir, path);
}

/* Whether a file named base in dir (which exists) would be one of the
 * run's own files in train.out_dir: the same directory and name. */
static const char *own_file(const config *cfg, const char *dir, const char *base) {
    static const char *const own[] = {"metrics.jsonl", "config.ini", ".lock"};
    char real_dir[PATH_MAX], real_out[PATH_MAX];
    if (!realpath(dir, real_dir) || !realpath(cfg->out_dir, real_out) || strcmp(real_dir, real_out) != 0) return NULL;
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
        if (strcmp(base, own[i]) == 0) return own[i];
    return NULL;
}

/* dist.timeline's part for job rank `rank` (<trace>.rank<R>.part), its
 * directory made; an earlier run's part there (a killed run's events) is
 * kept aside, not truncated. Rank 0 also refuses a trace path that is not
 * a regular file or is one of the run's own files. CNT_ERR naming
 * dist.timeline. */
int run_timeline_part(const config *cfg, int rank, char *part, size_t len) {
    char path[2 * CONFIG_STR + 8], dir[2 * CONFIG_STR + 8], kept[2 * CONFIG_STR + 64];
    run_path_in_out_dir(cfg, cfg->timeline, path, sizeof path);
    snprintf(part, len, "%s.rank%d.part", path, rank);
    if (file_dir_of(path, dir, sizeof dir) != CNT_OK || make_dirs(dir) != CNT_OK)
        return cnt_err_prefix("dist.timeline");
    if (rank == 0) {
        struct stat st;
        const char *base = strrchr(path, '/'), *clash = own_file(cfg, dir, base ? base + 1 : path);
        if (clash)
            return cnt_err_set("dist.timeline = %s is this run's %s in train.out_dir: give the trace another name",
                               cfg->timeline, clash);
        if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
            return cnt_err_set("dist.timeline = %s: '%s' is %s, not a regular file", cfg->timeline, path,
                               file_kind_name(st.st_mode));
    }
    if (timeline_part_in_use(part))
        return cnt_err_set("dist.timeline = %s: its part '%s' is being written by another run: give this run "
                           "another dist.timeline",
                           cfg->timeline, part);
    int moved = file_keep_aside(part, "timeline part", kept, sizeof kept);
    if (moved == CNT_ERR) return cnt_err_prefix("dist.timeline");
    if (moved) log_warn("dist.timeline: an earlier run's part %s (a run that did not finish) moved to %s", part, kept);
    return CNT_OK;
}

/* The checkpoint checkpoint.resume asks for: 1 with its path in path (auto:
 * the newest in checkpoint.dir), 0 for none. `say`: tell when auto finds no
 * checkpoint. */
int run_resume_path(const config *cfg, char *path, size_t len, int say) {
    switch (config_resume(cfg)) {
    case RESUME_NONE: return 0;
    case RESUME_FILE: snprintf(path, len, "%s", cfg->ckpt_resume); return 1;
    case RESUME_AUTO: break;
    }
    char dir[2 * CONFIG_STR + 8];
    run_path_in_out_dir(cfg, cfg->ckpt_dir, dir, sizeof dir);
    if (ckpt_find_latest(dir, path, len) == CNT_OK) return 1;
    if (say) log_info("checkpoint.resume = auto: no checkpoint in %s, starting from scratch", dir);
    return 0;
}

/* config.ini in train.out_dir: this run's effective config. An earlier
 * run's that differs is kept as config.YYYYMMDD-HHMMSS.ini (its time; -2,
 * -3, ... when taken), so every run's config survives a resume; CNT_ERR,
 * named, when it cannot be kept. Rank 0. */
int run_write_config_ini(const config *cfg, const char *text, size_t len) {
    char path[CONFIG_STR + 32], tmp[CONFIG_STR + 40];
    snprintf(path, sizeof path, "%s/config.ini", cfg->out_dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    struct stat lst;
    FILE *old = NULL;
    if (lstat(path, &lst) == 0 && !(old = file_open_regular(path, "config record", NULL)))
        return CNT_ERR; /* not a regular file: named */
    if (old) {
        char *prev = cnt_malloc(len + 2);
        size_t n = fread(prev, 1, len + 1, old);
        int same = n == len && memcmp(prev, text, len) == 0;
        free(prev);
        fclose(old);
        if (same) return CNT_OK;
        /* -2, -3, ... when runs start within one second; refused rather than overwritten */
        char kept[CONFIG_STR + 64];
        if (file_keep_aside(path, "run's config record", kept, sizeof kept) < 0) return CNT_ERR;
    }
    FILE *f = fopen(tmp, "w");
    if (!f) return cnt_err_set("cannot write '%s': %s", tmp, strerror(errno));
    int failed = fwrite(text, 1, len, f) != len ? cnt_err_set("cannot write '%s': %s", tmp, strerror(errno)) : 0;
    return file_commit_atomic(f, failed, tmp, path, cfg->out_dir, "config");
}

/* Rank 0: what a resume would start from, kept as the process's last words
 * (said by an abort, or by run_finish's last line). */
void run_set_last_checkpoint(const char *path, long step) {
    char text[3 * CONFIG_STR + 64];
    snprintf(text, sizeof text, "last checkpoint %s (step %ld)", path, step);
    cnt_set_last_words(text);
}

/* This process's start time in clock ticks since boot (/proc/<pid>/stat's
 * 22nd field), for telling a live lock owner from a reused pid; 0 when it
 * cannot be read. */
static unsigned long long process_start(long pid) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')'); /* the command name may hold spaces and parentheses */
    unsigned long long start = 0;
    if (p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
                    &start) != 1)
        start = 0;
    return start;
}

/* A file system whose flock may hold on this node only (Lustre mounted
 * with localflock, some NFS setups) or not at all: the lock file is taken
 * there too. */
static const char *network_fs(const char *dir) {
    struct statfs sf;
    if (statfs(dir, &sf) != 0) return NULL;
    switch ((unsigned long)sf.f_type) {
    case 0x6969UL: return "NFS";
    case 0x0BD00BD0UL: return "Lustre";
    case 0x47504653UL: return "GPFS";
    case 0x19830326UL: return "BeeGFS";
    case 0xFF534D42UL: case 0xFE534D42UL: return "SMB";
    case 0x00C36400UL: return "CephFS";
    default: return NULL;
    }
}

/* The lock as a file, where flock cannot be trusted: train.out_dir/.lock.run
 * made with O_EXCL, holding "pid P on HOST start S". One left by a process
 * of this host that no longer runs (its pid gone, or reused: another start
 * time) is stale: removed, said, and taken. One of another host is
 * refused: its liveness cannot be checked from here. */
static int lock_by_file(run *r, const char *why) {
    const config *cfg = r->cfg;
    char path[CONFIG_STR + 16], host[64] = "?", me[192];
    snprintf(path, sizeof path, "%s/.lock.run", cfg->out_dir);
    gethostname(host, sizeof host - 1);
    int len = snprintf(me, sizeof me, "pid %ld on %s start %llu\n", (long)getpid(), host, process_start(getpid()));
    for (int attempt = 0; attempt < 2; attempt++) {
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
        if (fd >= 0) {
            int ok = write(fd, me, (size_t)len) == len && fsync(fd) == 0;
            close(fd);
            if (!ok) {
                unlink(path);
                return cnt_err_set("cannot write the lock file '%s': %s", path, strerror(errno));
            }
            snprintf(r->lock_file, sizeof r->lock_file, "%s", path);
            log_info("lock: %s: the lock is the file %s (this run's pid and host)", why, path);
            return CNT_OK;
        }
        if (errno != EEXIST) return cnt_err_set("cannot create the lock file '%s': %s", path, strerror(errno));
        FILE *f = file_open_regular(path, "lock file", NULL);
        if (!f) return CNT_ERR;
        char owner[192] = "", who[64] = "";
        long pid = 0;
        unsigned long long start = 0;
        if (!fgets(owner, sizeof owner, f)) owner[0] = '\0';
        fclose(f);
        owner[strcspn(owner, "\n")] = '\0';
        int parsed = sscanf(owner, "pid %ld on %63s start %llu", &pid, who, &start) == 3;
        int stale = parsed && strcmp(who, host) == 0 && pid > 0 &&
                    ((kill((pid_t)pid, 0) != 0 && errno == ESRCH) || (start && process_start(pid) != start));
        if (!stale)
            return cnt_err_set("train.out_dir = %s is in use by another run (%s; lock %s, a file because %s): "
                               "give this run another train.out_dir, stop that one first, or remove the file if that "
                               "run is gone",
                               cfg->out_dir, owner[0] ? owner : "owner unknown", path, why);
        log_warn("lock: %s was left by %s, which no longer runs on this host: removed", path, owner);
        if (unlink(path) != 0 && errno != ENOENT)
            return cnt_err_set("cannot remove the stale lock file '%s': %s", path, strerror(errno));
    }
    return cnt_err_set("cannot take the lock file '%s': another run took it first", path);
}

/* Rank 0 takes train.out_dir/.lock (flock, exclusive, released when the
 * process ends however it ends): two runs writing one directory would cut
 * each other's metrics and overwrite each other's checkpoints. The file
 * holds the owner's pid and host, for the message the second run gives.
 * Where flock is not supported, or the directory is on a network file
 * system where it may hold on one node only, the lock file .lock.run is
 * taken (as well), removed when the run ends (run_unlock_out_dir). */
int run_lock_out_dir(run *r) {
    const config *cfg = r->cfg;
    char path[CONFIG_STR + 16];
    snprintf(path, sizeof path, "%s/.lock", cfg->out_dir);
    if (make_dirs(cfg->out_dir) != CNT_OK) return cnt_err_prefix("train.out_dir");
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
    if (fd < 0) return cnt_err_set("cannot create the lock file '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int err = errno;
        close(fd);
        return cnt_err_set("cannot look at the lock file '%s': %s", path, strerror(err));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return cnt_err_set("the lock file '%s' is %s, not a regular file: remove it", path,
                           file_kind_name(st.st_mode));
    }
    /* CNT_TEST_NO_FLOCK (tests only): behave as on a file system without flock */
    int forced = getenv("CNT_TEST_NO_FLOCK") != NULL;
    int rc = forced ? -1 : flock(fd, LOCK_EX | LOCK_NB), err = forced ? ENOSYS : errno;
    int unsupported = rc != 0 && (err == ENOSYS || err == ENOTSUP || err == EOPNOTSUPP || err == ENOLCK ||
                                  err == EINVAL);
    if (rc != 0 && !unsupported) {
        char owner[128] = "";
        ssize_t n = pread(fd, owner, sizeof owner - 1, 0);
        owner[n > 0 ? n : 0] = '\0';
        owner[strcspn(owner, "\n")] = '\0';
        close(fd);
        if (err == EWOULDBLOCK)
            return cnt_err_set("train.out_dir = %s is in use by another run (%s; lock %s): give this run another "
                               "train.out_dir, or stop that one first",
                               cfg->out_dir, owner[0] ? owner : "owner unknown", path);
        return cnt_err_set("cannot lock '%s': %s", path, strerror(err));
    }
    const char *fs = network_fs(cfg->out_dir);
    if (unsupported || fs) {
        char why[CONFIG_STR + 160];
        if (unsupported) snprintf(why, sizeof why, "flock is not supported on %s's file system (%s)", cfg->out_dir,
                                  strerror(err));
        else snprintf(why, sizeof why, "%s is on %s, where flock may hold on this node only", cfg->out_dir, fs);
        if (lock_by_file(r, why) != CNT_OK) {
            close(fd);
            return CNT_ERR;
        }
    }
    char me[160], host[64] = "?";
    gethostname(host, sizeof host - 1);
    int len = snprintf(me, sizeof me, "pid %ld on %s\n", (long)getpid(), host);
    if (ftruncate(fd, 0) != 0 || pwrite(fd, me, (size_t)len, 0) != len)
        log_warn("cannot record this run in the lock file '%s': %s", path, strerror(errno));
    r->lock_fd = fd;
    return CNT_OK;
}

void run_unlock_out_dir(run *r) {
    if (r->lock_file[0]) unlink(r->lock_file);
    r->lock_file[0] = '\0';
    if (r->lock_fd >= 0) close(r->lock_fd);
    r->lock_fd = -1;
}

/* metrics.jsonl's "run" record (rank 0; train/metrics.h). */
int run_write_record(run *r) {
    const config *cfg = r->cfg;
    exchange_traits xt = exchange_traits_of(r->x);
    metrics_run_info in = {
        .model = cfg->model_name,
        .mode = xt.mode_name,
        .device = r->be->name,
        .precision = config_name(cfg, &cfg->precision),
        .params = (long)r->nt->n_params,
        .ranks = dist_job_world(),
        .workers = r->world,
        .servers = xt.serves ? cfg->ps_servers : 0,
        .batch = cfg->batch_size,
        .accumulate = cfg->accumulate,
        .epochs = cfg->epochs,
        .threads = r->be->is_cpu ? omp_get_max_threads() : 0,
        .steps_per_epoch = r->steps_per_epoch,
        .config_hash = run_config_hash(cfg),
    };
    return metrics_run(progress_metrics(r->pg), &in);
}
