package queue

import (
	"context"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
)

// The claim script gives whole rounds at once when the lanes in its heap
// share a weight and lie within one step of each other (rounds). That is a
// shortcut, not a new order: over random groups (sizes, priorities, bulk
// totals that move weights as they shrink) and random claim sizes, the
// script serves exactly the jobs, in exactly the order, that the per-job
// heap serves, and leaves the same virtual times behind.
func TestClaimRoundsServeTheSameOrderAsTheHeap(t *testing.T) {
	heapOnly := buildScript("claim/rounds=off", claimSource(roundsOff)...)
	withRounds := claimScript
	t.Cleanup(func() { claimScript = withRounds })

	ctx := context.Background()
	const seeds = 12
	interleaved := 0 // claims that served lanes in turn
	for seed := range uint64(seeds) {
		rng := rand.New(rand.NewPCG(seed, 17))
		a := newPool(t, 1, testenv.Redis(t).Addr(), nil)
		b := newPool(t, 1, testenv.Redis(t).Addr(), nil)
		groups := 2 + rng.IntN(10)
		for g := range groups {
			name := "g" + strconv.Itoa(g)
			n, weight := 1+rng.IntN(300), 1+rng.IntN(3)
			items := make([]Item, n)
			for i := range items {
				items[i] = item(name+"-"+strconv.Itoa(i), name)
				items[i].Weight = weight
				if g%3 == 0 {
					items[i].GroupTotal = int64(n) // bulk: its weight grows as it shrinks
				}
			}
			for _, p := range []*Pool{a, b} {
				if _, err := p.Enqueue(ctx, 1, items, now); err != nil {
					t.Fatal(err)
				}
			}
		}
		for claim := 0; ; claim++ {
			k := 1 + rng.IntN(128)
			before := virtualTimes(t, b)
			claimScript = withRounds
			got, err := a.Claim(ctx, jq(0), k, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			claimScript = heapOnly
			want, err := b.Claim(ctx, jq(0), k, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want) {
				t.Fatalf("seed %d, claim %d of %d: %d jobs with rounds, %d without", seed, claim, k, len(got), len(want))
			}
			if len(got) == 0 {
				break
			}
			for i := range got {
				if got[i].ID != want[i].ID {
					var gs, ws []string
					for j := range got {
						gs, ws = append(gs, got[j].ID), append(ws, want[j].ID)
					}
					t.Logf("with rounds: %v\nwithout: %v\nvt before %v", gs, ws, before)
					t.Fatalf("seed %d, claim %d of %d: job %d is %s with rounds, %s without", seed, claim, k, i, got[i].ID, want[i].ID)
				}
			}
			if len(got) > 2 && got[0].Group != got[1].Group && got[1].Group != got[2].Group {
				interleaved++
			}
			ack(t, a, 0, got...)
			ack(t, b, 0, want...)
			za, zb := virtualTimes(t, a), virtualTimes(t, b)
			for lane, v := range zb {
				if za[lane] != v {
					t.Fatalf("seed %d, claim %d: lane %s at %v with rounds, %v without", seed, claim, lane, za[lane], v)
				}
			}
		}
	}
	if interleaved < seeds {
		t.Fatalf("only %d claims interleaved lanes: the test hardly exercised rounds", interleaved)
	}
	// And rounds are taken where they should be: four groups of one weight.
	claimScript = buildScript("claim/rounds=probe", claimSource(roundsProbe)...)
	p := newPool(t, 1, testenv.Redis(t).Addr(), nil)
	for g := range 4 {
		enqueueGroup(t, p, "even"+strconv.Itoa(g), 50, 1)
	}
	if _, err := p.Claim(ctx, jq(0), 64, time.Minute); err == nil || !strings.Contains(err.Error(), "rounds taken") {
		t.Fatalf("four groups of one weight: the claim did not take rounds (%v)", err)
	}
}

// virtualTimes reads the fair order of partition 0: lane -> virtual time.
func virtualTimes(t *testing.T, p *Pool) map[string]float64 {
	t.Helper()
	zs, err := p.byPart[0].ZRangeWithScores(context.Background(), p.keyspace.Keys(jq(0)).Lanes(), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]float64, len(zs))
	for _, z := range zs {
		out[z.Member.(string)] = z.Score
	}
	return out
}
