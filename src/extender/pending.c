#include "pending.h"
#include "strmap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The claim packed (claim_pack): about 100 bytes where a struct claim takes 1208, times thousands of pods. */
struct pending_entry {
	char uid[64];
	bool live;      /* false once forgotten; the ring slot is reused later */
	uint64_t claim[];
};

int pending_init(struct pending *p, size_t cap)
{
	memset(p, 0, sizeof(*p));
	p->ring = calloc(cap, sizeof(*p->ring));
	p->map = calloc(1, sizeof(struct strmap));
	if (!p->ring || !p->map) {
		free(p->ring);
		free(p->map);
		return -1;
	}
	strmap_init(p->map);
	p->cap = cap;
	pthread_mutex_init(&p->lock, NULL);
	return 0;
}

void pending_release(struct pending *p)
{
	for (size_t i = 0; i < p->len; i++)
		free(p->ring[(p->head + i) % p->cap]);
	strmap_release(p->map);
	free(p->map);
	free(p->ring);
	pthread_mutex_destroy(&p->lock);
}

/* Drops the oldest ring slot (its entry may already be forgotten). */
static void drop_oldest(struct pending *p)
{
	struct pending_entry *e = p->ring[p->head];
	if (e->live)
		strmap_del(p->map, e->uid);
	free(e);
	p->head = (p->head + 1) % p->cap;
	p->len--;
}

int pending_put(struct pending *p, const char *uid, const struct claim *c)
{
	struct buf packed;
	buf_init(&packed, 1 << 16);
	struct pending_entry *e = claim_pack(c, &packed) ? NULL : calloc(1, sizeof(*e) + packed.len);
	if (e)
		memcpy(e->claim, packed.data, packed.len);
	buf_release(&packed);
	if (!e)
		return -1;
	snprintf(e->uid, sizeof(e->uid), "%s", uid);
	e->live = true;
	pthread_mutex_lock(&p->lock);
	struct pending_entry *old = strmap_get(p->map, uid);
	if (old)
		old->live = false;      /* superseded; its slot ages out */
	if (p->len == p->cap)
		drop_oldest(p);
	int rc = strmap_put(p->map, uid, e, NULL);
	if (!rc) {
		p->ring[(p->head + p->len) % p->cap] = e;
		p->len++;
	} else if (old) {
		old->live = true;
	}
	pthread_mutex_unlock(&p->lock);
	if (rc)
		free(e);
	return rc;
}

bool pending_get(struct pending *p, const char *uid, struct claim *out)
{
	pthread_mutex_lock(&p->lock);
	struct pending_entry *e = strmap_get(p->map, uid);
	bool ok = e && !claim_unpack(e->claim, out);
	pthread_mutex_unlock(&p->lock);
	return ok;
}
