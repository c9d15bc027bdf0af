/*
 * Internal to src/reserve: edits of the nodes' ledgers, through the store
 * (store.h), and releases. A node's edits take turns in this replica, and
 * one turn carries every edit that queued for the node meanwhile.
 */
#ifndef GPU_RESERVE_UPDATE_H
#define GPU_RESERVE_UPDATE_H

#include "reserve_impl.h"

/* What an edit of a ledger decided. */
enum { LEDGER_WRITE = 0, LEDGER_UNCHANGED = 1 };
typedef int (*ledger_edit_fn)(void *ctx, struct ledger *l, char *err, size_t errlen);

/*
 * Reads the node's ledger, lets edit change it, writes it back with the
 * resourceVersion read; on a conflict does it all again (bounded). Edits
 * of the node queued by other threads meanwhile go into the same write.
 * Returns 0 (written), LEDGER_UNCHANGED, or a negative BIND_* code with err
 * set.
 */
int reserve_ledger_update(struct reserve *r, const char *node, ledger_edit_fn edit, void *ctx,
			  char *err, size_t errlen);
/* A token for one bind try (or repair): never 0, and unique in this replica. */
uint32_t reserve_new_token(struct reserve *r);
/* What a release did with each entry: removed it, kept it (another version), or 0: none was there. */
enum { RESV_REMOVED = 1, RESV_KEPT = 2 };
/*
 * Removes the pods' reservations on the node (ledger, cache, their Leases).
 * With ids, only entries that are still version ids[k] (since and token): a
 * reservation another try of the bind took over, or made again after the
 * caller looked, stays. With what (n of them), what became of each once it
 * returned 0: only an entry RESV_REMOVED was released.
 */
int reserve_release(struct reserve *r, const char *node, const char *const *uids, const struct resv_id *ids, int n,
		    unsigned char *what, char *err, size_t errlen);
/*
 * Takes a gang's places back from the node (all versions), and writes its
 * ledger even when none is there: a write of those places that is still
 * under way (sent, its answer lost) then fails on the ledger's version, or
 * on its existence (a create), instead of leaving places no plan knows.
 */
int reserve_take_back(struct reserve *r, const char *node, const char *const *uids, int n, char *err, size_t errlen);
/* A release's edit: removes the entries of uids still at version ids[k] (all, ids NULL). */
struct remove_ctx {
	const char *const *uids;
	const struct resv_id *ids;
	unsigned char *what;
	char (*ns)[64];                      /* the namespace of each removed entry */
	int n;
	bool fence;                          /* write even when nothing is removed (reserve_take_back) */
};
int reserve_edit_remove(void *ctx, struct ledger *l, char *err, size_t errlen);
/* Deletes the pod's reservation Lease of that node once its ledger entry there is gone. */
void reserve_delete_reservation(struct reserve *r, const char *ns, const char *uid, const char *node);

#endif
