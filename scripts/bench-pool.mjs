// The bench's client-side concurrency: how every section keeps N requests in flight.

// Runs fn over items with at most `concurrency` in flight; results in item order.
export async function inPool(items, concurrency, fn) {
  const out = new Array(items.length);
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next++;
      out[i] = await fn(items[i], i);
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, items.length) }, worker));
  return out;
}
