/* fp_walk.h: the user frame-pointer walk that the CPU sampler
 * (bpf/cpu.bpf.c) and the GPU probes (bpf/gpu.bpf.c) share. It is what
 * bpf_get_stack(BPF_F_USER_STACK) does, without that helper's fixed cost
 * (several microseconds a call on a 6.18 guest, whatever the depth:
 * bench/cpu_overhead.sh, bench/gpu_launch.sh).
 *
 * bpf_probe_read_user is the expensive step (about 80 ns a call on a 6.18
 * guest, the copy itself a few), so the walk reads the stack a block at a
 * time -- from a frame to the end of its page, FP_BLOCK bytes at most --
 * and follows the chain inside the block, reading again only for a frame
 * beyond it. A run of small frames costs one read, not one each.
 *
 * The walk runs under bpf_loop (one verification of the step, whatever the
 * depth) and works in a scratch buffer the caller owns for the duration of
 * the program: a per-CPU map value where programs can't interleave on a
 * CPU, per-task storage where they can. */
#ifndef SONDE_BPF_FP_WALK_H
#define SONDE_BPF_FP_WALK_H

#define FP_BLOCK 1024 /* bytes read at most at once; a power of two */
#define FP_PAGE 4096
#define FP_MAX_FRAMES 128 /* return addresses at most; a power of two */

/* The walk's state lives in the map value, not on the BPF stack: the
 * verifier tracks stack slots exactly, and a count that differs at every
 * step would make it check the step once per value instead of once. */
struct fp_scratch {
	__u64 block[FP_BLOCK / 8];
	__u64 ips[FP_MAX_FRAMES];
	__u64 fp;    /* the frame to read next */
	__u64 base;  /* the user address block[0] was read from */
	__u64 words; /* block's words that hold the stack */
	__u64 n;     /* return addresses in ips */
};

static long fp_walk_step(__u64 i, void *arg)
{
	struct fp_scratch *b = *(struct fp_scratch **)arg;
	__u64 fp = b->fp, off, next, ret;

	if (!fp || (fp & 7))
		return 1;
	off = (fp - b->base) / 8;
	if (fp < b->base || off + 1 >= b->words) {
		/* A new block at fp, up to the end of its page (mapped: fp
		 * is in it); a frame in the page's last word reads on into
		 * the next page. */
		__u64 size = FP_PAGE - (fp & (FP_PAGE - 1));

		if (size > FP_BLOCK)
			size = FP_BLOCK;
		if (size < 16)
			size = 16;
		if (bpf_probe_read_user(b->block, size, (const void *)fp))
			return 1;
		b->base = fp;
		b->words = size / 8;
		off = 0;
	}
	next = b->block[off & (FP_BLOCK / 8 - 1)];
	ret = b->block[(off + 1) & (FP_BLOCK / 8 - 1)];
	if (!ret)
		return 1;
	b->ips[b->n & (FP_MAX_FRAMES - 1)] = ret;
	b->n++;
	/* The chain must go up the stack, or it is not one. */
	if (next <= fp)
		return 1;
	b->fp = next;
	return 0;
}

/* Walks the chain from the frame pointer fp, at most max frames (max <=
 * FP_MAX_FRAMES), into b->ips, caller after callee. Stops at a frame that
 * can't be read, a null return address, or a chain that doesn't go up the
 * stack. Returns the return addresses in b->ips. */
static __always_inline __u32 fp_walk(__u64 fp, __u32 max, struct fp_scratch *b)
{
	b->fp = fp;
	b->base = 0;
	b->words = 0;
	b->n = 0;
	bpf_loop(max, fp_walk_step, &b, 0);
	return b->n < max ? b->n : max;
}

#endif
