/*
 * way.c - which way a kernel's launches of many cubes run on the CPU device.
 *
 * Spreading a launch over PoCL's threads wakes them, and that can cost
 * more than a brief launch of many cubes runs: a 16-cube launch of 10 us of
 * work took 20-80 us spread on two CPUs. Which launches are brief, their
 * count does not say (1,000 units can run 100,000 steps each), so each
 * kernel's launches of many cubes are timed. CUBE__WAY_FIRST spread show
 * whether running one on one thread could cost much: CUBE__WAY_TRY_INLINE_NS,
 * what they took times the CPUs they were spread over, bounds what a long
 * kernel pays for the trial. Where it could not, CUBE__WAY_SAMPLE launches
 * are timed each way, the two mixed at random so that both meet the same
 * machine (a build running beside them, say), and from then on they run the
 * way that was faster. They are timed again every CUBE__WAY_AGAIN launches
 * (a kernel's sizes change), and at once when CUBE__WAY_SLOW_RUN inline
 * launches in a row take far longer than the trial's.
 *
 * A trial compares means: a spread launch's time runs from the end of the
 * one before it, so the first of a batch pays for waking PoCL's threads and
 * the rest do not, and only a mean counts that cost as often as it is paid.
 * But each launch counts for at most CUBE__WAY_CLIP times the larger of the
 * two ways' medians: one launch preempted for 5 ms, beside 63 of 10 us, made
 * a mean of 88 us, more than the spread launches' 40, and sent a brief
 * kernel spread for its next 65,536 launches. For the same reason one slow
 * inline launch does not end a verdict, and the first spread launches are
 * judged by their median.
 */
#include <stdlib.h>
#include <string.h>

#include "way.h"

static int cmp_u32(const void *a, const void *b)
{
        uint32_t x = *(const uint32_t *) a, y = *(const uint32_t *) b;

        return x < y ? -1 : x > y;
}

/* The median of the first n (1 to CUBE__WAY_SAMPLE) of t. */
static uint32_t median(const uint32_t *t, uint32_t n)
{
        uint32_t s[CUBE__WAY_SAMPLE];

        memcpy(s, t, n * sizeof(*t));
        qsort(s, n, sizeof(*s), cmp_u32);
        return s[n / 2];
}

/* The mean of t's first n, each taken as at most clip. */
static uint64_t clipped_mean(const uint32_t *t, uint32_t n, uint64_t clip)
{
        uint64_t sum = 0;

        for (uint32_t i = 0; i < n; i++)
                sum += t[i] < clip ? t[i] : clip;
        return sum / n;
}

/* Back to the first timing, every count cleared. */
static void time_again(cube__way *w)
{
        memset(w, 0, sizeof(*w));
        w->way = WAY_TIMING_SPREAD;
}

void cube__way_timed(cube__way *w, bool in_line, uint64_t ns, unsigned cpus)
{
        uint32_t t = ns > UINT32_MAX ? UINT32_MAX : (uint32_t) ns;

        if (in_line && w->way == WAY_TIMING_BOTH && w->inline_n < CUBE__WAY_SAMPLE)
                w->inline_ns[w->inline_n++] = t;
        else if (!in_line && (w->way == WAY_TIMING_SPREAD || w->way == WAY_TIMING_BOTH) &&
                 w->spread_n < CUBE__WAY_SAMPLE)
                w->spread_ns[w->spread_n++] = t;
        switch (w->way) {
        case WAY_TIMING_SPREAD:
                if (w->spread_n < CUBE__WAY_FIRST)
                        break;
                bool try_inline = (uint64_t) median(w->spread_ns, w->spread_n) * cpus <
                                  CUBE__WAY_TRY_INLINE_NS;
                time_again(w);
                w->way = try_inline ? WAY_TIMING_BOTH : WAY_SPREAD;
                break;
        case WAY_TIMING_BOTH:
                if (w->spread_n < CUBE__WAY_SAMPLE || w->inline_n < CUBE__WAY_SAMPLE)
                        break;
                w->typical_ns = median(w->inline_ns, w->inline_n);
                uint32_t spread = median(w->spread_ns, w->spread_n);
                uint64_t clip = CUBE__WAY_CLIP * (uint64_t) (w->typical_ns > spread ?
                                                             w->typical_ns : spread);
                w->way = clipped_mean(w->inline_ns, w->inline_n, clip) <
                         clipped_mean(w->spread_ns, w->spread_n, clip) ? WAY_INLINE : WAY_SPREAD;
                break;
        case WAY_SPREAD:
        case WAY_INLINE:
                if (w->way == WAY_INLINE && in_line)
                        w->slow = ns > CUBE__WAY_TRY_INLINE_NS + 4ull * w->typical_ns ?
                                  w->slow + 1 : 0;
                if (++w->since == CUBE__WAY_AGAIN || w->slow == CUBE__WAY_SLOW_RUN)
                        time_again(w);
                break;
        }
}
