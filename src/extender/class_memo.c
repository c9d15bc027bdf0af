#include "class_memo.h"

static unsigned home(struct gpu_state_digest state)
{
	return (unsigned)(state.a % CLASS_MEMO_SLOTS);
}

void class_memo_init(struct class_memo *m)
{
	m->used = m->looked = m->found = 0;
	m->off = false;
	for (int i = 0; i < CLASS_MEMO_SLOTS; i++)
		m->slot[i].used = false;
}

const struct class_result *class_memo_find(const struct class_memo *m, struct gpu_state_digest state)
{
	if (m->off)
		return NULL;
	/* Never more than half full: the probe meets an empty slot. */
	for (unsigned i = home(state);; i = (i + 1) % CLASS_MEMO_SLOTS) {
		const struct class_slot *s = &m->slot[i];
		if (!s->used)
			return NULL;
		if (s->state.a == state.a && s->state.b == state.b)
			return &s->result;
	}
}

void class_memo_add(struct class_memo *m, struct gpu_state_digest state, const struct class_result *r)
{
	if (m->used >= CLASS_MEMO_MAX || m->off)
		return;
	unsigned i = home(state);
	while (m->slot[i].used)
		i = (i + 1) % CLASS_MEMO_SLOTS;
	m->slot[i] = (struct class_slot){ state, true, *r };
	m->used++;
}

void class_memo_count(struct class_memo *m, bool found)
{
	if (m->off || m->looked >= CLASS_MEMO_TRIAL)
		return;
	m->found += found;
	if (++m->looked == CLASS_MEMO_TRIAL && m->found * CLASS_MEMO_PAYS < CLASS_MEMO_TRIAL)
		m->off = true;
}
