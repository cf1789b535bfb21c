// Serial-gate figures for `npm run bench` (filled in with the deploy run).
export async function benchGates() {
  return [];
}
