package bench

import (
	"fmt"
	"slices"
	"time"
)

// NoisyAbove is the widest spread a ratio may have and still be read: a
// ratio whose rounds span more than this fraction of their median
// ((max-min)/median) is reported as "noisy: not readable" instead of as a
// number. A 50 % lead and parity differ by a third of the larger figure,
// so a spread wider than a fifth could hide the difference between them.
const NoisyAbove = 0.20

// Spread summarizes one ratio measured over several alternating rounds.
type Spread struct {
	// Rounds are the per-round values, in the order measured.
	Rounds []float64 `json:"rounds"`
	Median float64   `json:"median"`
	Min    float64   `json:"min"`
	Max    float64   `json:"max"`
	// Rel is (Max-Min)/Median; Noisy says Rel > NoisyAbove (or fewer than
	// three rounds were measured, which cannot show a spread).
	Rel   float64 `json:"rel_spread"`
	Noisy bool    `json:"noisy"`
}

// summarize is the median and min–max of xs (zero Spread for none). The
// median of an even count is the mean of the middle two.
func summarize(xs []float64) Spread {
	s := Spread{Rounds: append([]float64(nil), xs...)}
	if len(xs) == 0 {
		return s
	}
	sorted := slices.Sorted(slices.Values(xs))
	s.Min, s.Max = sorted[0], sorted[len(sorted)-1]
	s.Median = median(sorted)
	if s.Median > 0 {
		s.Rel = (s.Max - s.Min) / s.Median
	}
	s.Noisy = len(xs) < 3 || s.Rel > NoisyAbove
	return s
}

// median of an already sorted slice.
func median(sorted []float64) float64 {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

// ratios divides num[i] by den[i], round by round; a round with either side
// missing (zero) is left out.
func ratios(num, den []float64) []float64 {
	var out []float64
	for i := range min(len(num), len(den)) {
		if num[i] > 0 && den[i] > 0 {
			out = append(out, num[i]/den[i])
		}
	}
	return out
}

// Text renders the spread as the report prints a ratio: "1.05 (0.98–1.10,
// 5 rounds)", or "noisy: not readable (…)" when it is too wide.
func (s Spread) Text() string {
	if len(s.Rounds) == 0 {
		return "—"
	}
	rng := fmt.Sprintf("%.2f–%.2f, %d rounds", s.Min, s.Max, len(s.Rounds))
	if s.Noisy {
		return fmt.Sprintf("noisy: not readable (median %.2f, %s, spread %.0f %% > %.0f %%)", s.Median, rng, 100*s.Rel, 100*NoisyAbove)
	}
	return fmt.Sprintf("%.2f (%s)", s.Median, rng)
}

// quantile is the p-quantile (nearest rank) of sorted durations, in ms.
func quantile(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted))+0.5) - 1
	return float64(sorted[max(0, min(i, len(sorted)-1))].Microseconds()) / 1000
}
