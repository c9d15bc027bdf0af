/*
 * gang: where the members of a gang go, all of them at once. Pure: reads the
 * nodes and the claim, writes only *out.
 *
 * Every member asks the same claim and runs on one node; a node may take
 * several. The plan keeps the gang compact: inside one topology domain (the
 * nodes that share a value of the topology label: a zone, a rack; nodes
 * without it form one domain of their own) when one can hold it, the one
 * that holds it most tightly so that bigger domains stay free; else across
 * as few domains as possible, the largest first. Inside, on as few nodes
 * as possible (the nodes with room for most members first; of equal ones
 * the fullest, so that free nodes stay whole), and on each node the devices
 * the fit chooses (islands kept whole where it can).
 */
#ifndef GPU_GANG_H
#define GPU_GANG_H

#include "claim.h"
#include "fit.h"
#include "gpu.h"

struct gang_slot {
	int node;                 /* index into the nodes given */
	struct fit fit;           /* the member's devices there */
};

struct gang_plan {
	bool ok;
	int nslots;               /* == members when ok */
	struct gang_slot *slots;  /* gang_plan_release() frees them */
	int places;               /* members the nodes have room for, up to members (when !ok: fewer) */
	int domains, nodes;       /* the spread of the plan */
	char reason[256];         /* when !ok, one line: what the gang needs and what is free */
};

/*
 * Plans members of claim c on the n nodes (as they are used now). Returns
 * 0 with out->ok telling whether the whole gang fits; -1 when out of memory.
 */
int gang_plan(const struct gpu_node *const *nodes, int n, const struct claim *c, int members,
	      const char *topology_key, struct gang_plan *out);
void gang_plan_release(struct gang_plan *p);

/* A place a gang holds on a node: the devices reserved for one member, and how. */
struct gang_place {
	enum claim_mode mode;
	int ndev;
	int ids[GPU_MAX_DEVICES];   /* device ids */
	uint32_t mem_mib, core;     /* shared: taken on each device */
};

/*
 * Whether a member asking c may take over place p on node n: the place is
 * exactly what c would reserve (mode, count, the share of each device) and
 * c's whole claim holds on exactly its devices (vendor, model or MIG
 * profile, architecture, memory, node labels, topology), as fit_node
 * decides on n with every other device left out and the place's own use
 * taken off. False with why (one line: "places of ...; this member asks
 * ..." or the fit's reason).
 */
bool gang_place_fits(const struct gpu_node *n, const struct gang_place *p, const struct claim *c, char *why,
		     size_t size);

#endif
