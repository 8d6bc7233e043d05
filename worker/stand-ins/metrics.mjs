// The stand-in Workers Analytics Engine dataset behind a local shard's `METRICS` binding
// (worker/local.mjs `metrics`): each data point is logged as one JSON line `{"metric": point}`.
// Miniflare loads it as a wrapped binding: the default export builds the binding.

export default function () {
  return {
    writeDataPoint(point) {
      console.log(JSON.stringify({ metric: point }));
    },
  };
}
