#include "strmap.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static char tomb_marker;
#define STRMAP_TOMB (&tomb_marker)

size_t strmap_hash(const char *key)
{
	/*
	 * Eight bytes per step (node names are looked up thousands of times a
	 * request): xor, multiply, fold; the last partial word carries the length.
	 */
	size_t len = strlen(key), n = len;
	uint64_t h = 0x9e3779b97f4a7c15ULL, w;
	for (; n >= 8; n -= 8, key += 8) {
		memcpy(&w, key, 8);
		h = (h ^ w) * 0xff51afd7ed558ccdULL;
		h ^= h >> 32;
	}
	/*
	 * The last n bytes as the low bytes of w, in registers: copied bytewise
	 * into a word on the stack, the word's load waited for the stores.
	 */
	w = 0;
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	if (n && len >= 8) {
		memcpy(&w, key + n - 8, 8);   /* ends at the last byte; its first 8 - n are the previous word's */
		w >>= 8 * (8 - n);
	} else if (n >= 4) {
		uint32_t lo, hi;
		memcpy(&lo, key, 4);
		memcpy(&hi, key + n - 4, 4);
		w = lo | (uint64_t)hi << 8 * (n - 4);
	} else {
		for (size_t i = 0; i < n; i++)
			w |= (uint64_t)(unsigned char)key[i] << 8 * i;
	}
#else
	for (size_t i = 0; i < n; i++)
		w |= (uint64_t)(unsigned char)key[i] << 8 * i;
#endif
	h = (h ^ w ^ (uint64_t)n << 56) * 0xc4ceb9fe1a85ec53ULL;
	return (size_t)(h ^ (h >> 29));
}

void strmap_init(struct strmap *m)
{
	memset(m, 0, sizeof(*m));
}

void strmap_release(struct strmap *m)
{
	for (size_t i = 0; i < m->cap; i++)
		if (m->slots[i].key && m->slots[i].key != STRMAP_TOMB)
			free(m->slots[i].key);
	unsigned rehashes = m->rehashes + 1;
	free(m->slots);
	strmap_init(m);
	m->rehashes = rehashes;
}

static struct strmap_slot *find(const struct strmap *m, const char *key, size_t h)
{
	if (!m->cap)
		return NULL;
	for (size_t i = h & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
		struct strmap_slot *s = &m->slots[i];
		if (!s->key)
			return NULL;
		if (s->key != STRMAP_TOMB && s->hash == h && !strcmp(s->key, key))
			return s;
	}
}

void *strmap_get(const struct strmap *m, const char *key)
{
	struct strmap_slot *s = find(m, key, strmap_hash(key));
	return s ? s->value : NULL;
}

static int grow(struct strmap *m)
{
	size_t cap = m->cap ? m->cap * 2 : 16;
	if (m->len * 2 < m->cap)
		cap = m->cap;          /* mostly tombstones: rehash in place size */
	struct strmap_slot *slots = calloc(cap, sizeof(*slots));
	if (!slots)
		return -1;
	for (size_t i = 0; i < m->cap; i++) {
		struct strmap_slot *s = &m->slots[i];
		if (!s->key || s->key == STRMAP_TOMB)
			continue;
		size_t j = s->hash & (cap - 1);
		while (slots[j].key)
			j = (j + 1) & (cap - 1);
		slots[j] = *s;
	}
	free(m->slots);
	m->slots = slots;
	m->cap = cap;
	m->used = m->len;
	m->rehashes++;
	return 0;
}

int strmap_put(struct strmap *m, const char *key, void *value, void **old)
{
	size_t h = strmap_hash(key);
	struct strmap_slot *s = find(m, key, h);
	if (old)
		*old = NULL;
	if (s) {
		if (old)
			*old = s->value;
		s->value = value;
		return 0;
	}
	if ((m->used + 1) * 4 > m->cap * 3 && grow(m))
		return -1;
	char *k = strdup(key);
	if (!k)
		return -1;
	size_t i = h & (m->cap - 1);
	while (m->slots[i].key && m->slots[i].key != STRMAP_TOMB)
		i = (i + 1) & (m->cap - 1);
	if (!m->slots[i].key)
		m->used++;
	m->slots[i].key = k;
	m->slots[i].value = value;
	m->slots[i].hash = h;
	m->len++;
	return 0;
}

void *strmap_del(struct strmap *m, const char *key)
{
	struct strmap_slot *s = find(m, key, strmap_hash(key));
	if (!s)
		return NULL;
	void *v = s->value;
	free(s->key);
	s->key = STRMAP_TOMB;
	s->value = NULL;
	m->len--;
	return v;
}

int strmap_next(const struct strmap *m, size_t *pos, const char **key, void **value)
{
	for (; *pos < m->cap; (*pos)++) {
		struct strmap_slot *s = &m->slots[*pos];
		if (s->key && s->key != STRMAP_TOMB) {
			*key = s->key;
			*value = s->value;
			(*pos)++;
			return 1;
		}
	}
	return 0;
}
