/*
 * train/ps_server.h - a parameter-server rank's run (dist.mode = ps): what a
 * rank that dist/exchange.h made a server does instead of training.
 *
 * Errors: CNT_ERR with a message when the model rank 0 describes cannot be
 * built or cut into the servers' shards; MPI failures and stalls end the job
 * (dist/ps.h).
 */
#ifndef CNT_PS_SERVER_H
#define CNT_PS_SERVER_H

#include "dist/exchange.h"
#include "train/config.h"

/* Serves until every worker has said goodbye: the model rank 0 describes,
 * built for its parameter layout only (a server reads no data, computes
 * nothing and allocates none of the net's buffers), this server's shard of
 * the parameters and momentum, and the optimizer's update applied to it
 * (dist/ps.h, ps_serve). x: an exchange on which exchange_is_server. */
int ps_server_run(const config *cfg, exchange *x);

#endif
