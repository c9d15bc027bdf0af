/*
 * class_memo: one request's results per state of a node. Nodes in the same
 * state (gpu_node_state_digest: devices, usage, islands, host) get the same
 * fit from a claim that names no labels or device strings, and the same
 * rating under a policy that reads nothing else (no node name, seed or
 * workload). A request then works each state out once: a cluster of a few
 * node types, most of them empty or full, costs a few fits instead of one
 * per node. A node in a state of its own costs one lookup more.
 *
 * Bounded: past CLASS_MEMO_MAX states the memo stops learning new ones.
 * A memo that does not pay stops: when fewer than one in CLASS_MEMO_PAYS
 * of the first CLASS_MEMO_TRIAL lookups found a state (a cluster whose
 * nodes all differ), it finds nothing more and the nodes go on their own.
 */
#ifndef GPU_CLASS_MEMO_H
#define GPU_CLASS_MEMO_H

#include "gpu.h"

#include <stdbool.h>
#include <stdint.h>

#define CLASS_MEMO_SLOTS 1024
#define CLASS_MEMO_MAX (CLASS_MEMO_SLOTS / 2)
#define CLASS_MEMO_TRIAL 256
#define CLASS_MEMO_PAYS 4

/* What a verb found for a node in one state. */
struct class_result {
	bool ok;             /* the claim fits */
	bool unresolvable;   /* filter: no preemption would help */
	int32_t reason;      /* filter: offset of the reason in the request's reasons; -1 when ok */
	double raw;          /* prioritize: the policy's rating; filter, when it rates too: that of a node that passes */
	bool rated;          /* filter that rates: the policy placed the claim (raw holds) */
};

struct class_memo {
	int used;
	int looked, found;   /* lookups counted (class_memo_count) and those that found */
	bool off;            /* it did not pay: finds nothing, learns nothing */
	struct class_slot {
		struct gpu_state_digest state;
		bool used;
		struct class_result result;
	} slot[CLASS_MEMO_SLOTS];
};

void class_memo_init(struct class_memo *m);
/* The result recorded for the state, or NULL. */
const struct class_result *class_memo_find(const struct class_memo *m, struct gpu_state_digest state);
/* Records r for a state not recorded yet. */
void class_memo_add(struct class_memo *m, struct gpu_state_digest state, const struct class_result *r);
/* Counts one node's lookup and whether it found; turns the memo off when it does not pay. */
void class_memo_count(struct class_memo *m, bool found);

#endif
