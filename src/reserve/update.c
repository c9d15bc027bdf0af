/* Edits of the nodes' ledgers in turns, through the store; releases. */
#include "update.h"
#include "clock.h"
#include "log.h"
#include "metrics.h"
#include "store.h"
#include "watch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ATTEMPTS 8

/* A short random pause between conflicting writes, so racing replicas spread out. */
static void conflict_pause(int attempt)
{
	unsigned seed = (unsigned)clock_wall_s() ^ (unsigned)(uintptr_t)&attempt ^ (unsigned)attempt;
	clock_sleep_us(1000 + rand_r(&seed) % (2000 << (attempt < 5 ? attempt : 5)));
}

/* One caller's edit of a node's ledger: its own turn, or a ride in another's. */
struct ledger_job {
	const char *node;
	ledger_edit_fn edit;
	void *ctx;
	char *err;
	size_t errlen;
	int rc;                 /* its edit's decision, then its result */
	bool done;
	struct ledger_job *next;
};

/* One job's result: failed, with why. */
static void job_fail(struct ledger_job *j, int rc, const char *err)
{
	j->rc = rc;
	snprintf(j->err, j->errlen, "%s", err);
}

/* Sets the result of every job that wanted a write (the others keep their decision). */
static void writers_fail(struct ledger_job *jobs, int rc, const char *err)
{
	for (struct ledger_job *j = jobs; j; j = j->next)
		if (j->rc == LEDGER_WRITE)
			job_fail(j, rc, err);
}

/* Every job's edit on l; how many decided to write, and how many anything else. */
static void decide(struct ledger_job *jobs, struct ledger *l, int *writes, int *others)
{
	*writes = *others = 0;
	for (struct ledger_job *j = jobs; j; j = j->next) {
		j->rc = j->edit(j->ctx, l, j->err, j->errlen);
		j->rc == LEDGER_WRITE ? (*writes)++ : (*others)++;
	}
}

/*
 * The jobs' edits in one write. First on the ledger as watched (or as we
 * last wrote it), which saves a read: the write's version still checks it.
 * Only decisions to write are taken on that copy; when an edit decides
 * anything else, all decide again on a fresh read.
 */
static void write_ledger(struct reserve *r, const char *node, struct ledger_job *jobs)
{
	char err[512];
	bool known = true;
	for (int attempt = 0; attempt < MAX_ATTEMPTS; attempt++) {
		struct ledger l, now;
		known = known && reserve_known_ledger(r, node, &l);
		if (!known && store_ledger_read(&r->store, node, &l, err, sizeof(err))) {
			for (struct ledger_job *j = jobs; j; j = j->next)
				job_fail(j, -BIND_ERROR, err);
			return;
		}
		int writes, others;
		decide(jobs, &l, &writes, &others);
		if (known && others) {
			ledger_release(&l);
			known = false;
			attempt--;
			continue;
		}
		int rc = writes ? store_ledger_write(&r->store, &l, &now, err, sizeof(err)) : STORE_OK;
		ledger_release(&l);
		if (!writes)
			return;
		if (rc == STORE_OK) {
			/* The next turn starts from what was written, not from a read. */
			if (now.rv[0])
				reserve_ledger_written(r, node, &now);
			else
				ledger_release(&now);
			return;              /* each writer's rc is LEDGER_WRITE: 0 */
		}
		if (rc != STORE_CONFLICT) {
			writers_fail(jobs, -BIND_ERROR, err);
			return;
		}
		/* Someone else wrote first: read again, decide again. */
		metrics_inc(M_RESERVE_CONFLICTS, 0);
		/* Only a conflict between replicas needs a pause; a stale watched copy does not. */
		if (!known)
			conflict_pause(attempt + 1);
		known = false;
	}
	snprintf(err, sizeof(err), "gave up after %d conflicting writes to the ledger of %s", MAX_ATTEMPTS, node);
	writers_fail(jobs, -BIND_CONFLICT, err);
}

int reserve_ledger_update(struct reserve *r, const char *node, ledger_edit_fn edit, void *ctx,
			  char *err, size_t errlen)
{
	struct ledger_job me = { .node = node, .edit = edit, .ctx = ctx, .err = err, .errlen = errlen };
	struct ledger_turns *t = &r->turns[strmap_hash(node) % LEDGER_TURNS];
	pthread_mutex_lock(&t->lock);
	struct ledger_job **end = &t->queue;   /* in the order they came */
	while (*end)
		end = &(*end)->next;
	*end = &me;
	while (!me.done && t->busy)
		clock_cond_wait(&t->done, &t->lock);
	if (me.done) {
		/* An earlier turn wrote our edit with its own. */
		pthread_mutex_unlock(&t->lock);
		return me.rc;
	}
	/* Our turn: take along every edit of this node that is waiting. */
	t->busy = true;
	struct ledger_job *batch = NULL, **tail = &batch;
	for (struct ledger_job **pp = &t->queue; *pp;) {
		struct ledger_job *j = *pp;
		if (strcmp(j->node, node)) {
			pp = &j->next;
			continue;
		}
		*pp = j->next;
		j->next = NULL;
		*tail = j;
		tail = &j->next;
	}
	pthread_mutex_unlock(&t->lock);
	write_ledger(r, node, batch);
	pthread_mutex_lock(&t->lock);
	t->busy = false;
	for (struct ledger_job *j = batch, *next; j; j = next) {
		next = j->next;          /* j may be gone once done is set */
		j->done = true;
	}
	pthread_cond_broadcast(&t->done);
	pthread_mutex_unlock(&t->lock);
	return me.rc;
}

uint32_t reserve_new_token(struct reserve *r)
{
	/* Odd multiplier: distinct counts give distinct tokens; the salt keeps replicas apart. */
	uint32_t t = (atomic_fetch_add(&r->tokens, 1) + 1) * 2654435761u ^ r->token_salt;
	return t ? t : 1;
}

/* ---- releases ---- */

/* Removes the pods' entries from a ledger. */
int reserve_edit_remove(void *ctx, struct ledger *l, char *err, size_t errlen)
{
	(void)err;
	(void)errlen;
	struct remove_ctx *rc = ctx;
	int removed = 0;
	for (int k = 0; k < rc->n; k++) {
		int i = ledger_find(l, rc->uids[k]);
		rc->what[k] = 0;
		if (i < 0)
			continue;
		if (rc->ids && !resv_id_eq(resv_id_of(&l->e[i].a), rc->ids[k])) {
			rc->what[k] = RESV_KEPT;    /* another try's, or reserved again since the caller looked */
			continue;
		}
		snprintf(rc->ns[k], sizeof(rc->ns[k]), "%s", l->e[i].ns);
		ledger_remove_at(l, i);
		rc->what[k] = RESV_REMOVED;
		removed++;
	}
	return removed || rc->fence ? LEDGER_WRITE : LEDGER_UNCHANGED;
}

/* Whether the node's ledger, as stored now, holds an entry of uid: 1, 0, or -1 (cannot tell). */
static int ledger_holds(struct reserve *r, const char *node, const char *uid)
{
	char err[256];
	struct ledger l;
	if (store_ledger_read(&r->store, node, &l, err, sizeof(err)))
		return -1;
	int holds = ledger_find(&l, uid) >= 0;
	ledger_release(&l);
	return holds;
}

/*
 * Whether a release whose ledger write failed went through all the same (a
 * reset or a timeout after the request went out): every entry it removed is
 * gone from the ledger as stored now. Then their reservation Leases must
 * go too: nothing else deletes them while their pods live.
 */
static bool released_anyway(struct reserve *r, const char *node, const char *const *uids, const unsigned char *what,
			    int n)
{
	char err[256];
	struct ledger l;
	/* an update that failed before its edit ran, or a read refused, decided nothing: not gone */
	bool decided = false;
	for (int k = 0; k < n; k++)
		decided = decided || what[k] == RESV_REMOVED;
	if (!decided || store_ledger_read(&r->store, node, &l, err, sizeof(err)))
		return false;
	bool gone = true;
	for (int k = 0; k < n; k++)
		if (what[k] == RESV_REMOVED && ledger_find(&l, uids[k]) >= 0)
			gone = false;
	ledger_release(&l);
	return gone;
}

static int release(struct reserve *r, const char *node, const char *const *uids, const struct resv_id *ids, int n,
		   bool fence, unsigned char *what_out, char *err, size_t errlen)
{
	unsigned char *what = calloc((size_t)n + 1, 1);
	char (*ns)[64] = calloc((size_t)n + 1, sizeof(*ns));
	if (!what || !ns) {
		free(what);
		free(ns);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	struct remove_ctx rc = { uids, ids, what, ns, n, fence };
	int res = reserve_ledger_update(r, node, reserve_edit_remove, &rc, err, errlen);
	if (res < 0 && released_anyway(r, node, uids, what, n)) {
		log_info("a release went through; its answer was lost", "node=%s error=\"%s\"", node, LOG_Q(err));
		res = 0;
	}
	if (res >= 0) {
		/* This node's records only: the pod may hold a newer reservation elsewhere. */
		cache_lock(r->o.cache);
		for (int k = 0; k < n; k++)
			if (what[k] == RESV_REMOVED)
				cache_remove_alloc(r->o.cache, uids[k], node);
		cache_unlock(r->o.cache);
		for (int k = 0; k < n; k++)
			if (what[k] == RESV_REMOVED && strncmp(uids[k], LEDGER_PLACE_PREFIX, sizeof(LEDGER_PLACE_PREFIX) - 1))
				reserve_delete_reservation(r, ns[k], uids[k], node);
		if (what_out)
			memcpy(what_out, what, (size_t)n);
	}
	free(what);
	free(ns);
	return res < 0 ? -1 : 0;
}

int reserve_release(struct reserve *r, const char *node, const char *const *uids, const struct resv_id *ids, int n,
		    unsigned char *what, char *err, size_t errlen)
{
	return release(r, node, uids, ids, n, false, what, err, errlen);
}

int reserve_take_back(struct reserve *r, const char *node, const char *const *uids, int n, char *err, size_t errlen)
{
	return release(r, node, uids, NULL, n, true, NULL, err, errlen);
}

/*
 * Read the Lease, then the ledger, then delete that very version of the
 * Lease (uid and resourceVersion preconditions). A retried bind of the pod
 * writes its ledger entry before it makes or renews the Lease, so either the
 * ledger read sees the entry (the Lease stays) or the renewal changed the
 * version (the delete fails) or came after (it makes the Lease again).
 */
void reserve_delete_reservation(struct reserve *r, const char *ns, const char *uid, const char *node)
{
	char err[256] = "", lease_uid[64] = "", version[32] = "";
	int rc = store_resv_read(&r->store, ns, uid, node, lease_uid, sizeof(lease_uid), version, sizeof(version), err,
				 sizeof(err));
	if (rc == STORE_NONE)
		return;
	if (rc == STORE_OK) {
		int holds = ledger_holds(r, node, uid);
		if (holds > 0)
			return;      /* reserved there again: the Lease is the new reservation's */
		if (holds < 0 || !lease_uid[0] || !version[0]) {
			snprintf(err, sizeof(err), "%s", holds < 0 ? "cannot read the ledger" : "a Lease without uid or version");
			rc = STORE_ERROR;
		} else {
			/* STORE_CONFLICT: renewed or made again since it was read, by a bind of the pod here. */
			rc = store_resv_delete(&r->store, ns, uid, node, lease_uid, version, err, sizeof(err));
			if (rc == STORE_OK)
				log_debug("deleted a reservation Lease", "ns=%s pod_uid=%s node=%s", ns, uid, node);
		}
	}
	if (rc == STORE_ERROR)
		log_warn("cannot delete a reservation Lease now (the reaper will, or the garbage collector with the pod)",
			 "ns=%s pod_uid=%s node=%s error=\"%s\"", ns, uid, node, LOG_Q(err));
}
