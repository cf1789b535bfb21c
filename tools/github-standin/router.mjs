// The stand-in's one router: each resource module registers its routes here (method, anchored
// path pattern, handler, whether an installation token is required); a request takes the first
// route whose method and pattern match. Handlers are called as handler(hub, ctx, ...captures).

// One path segment, captured.
export const R = '([^/]+)';
// Owner and repo segments are single path segments; later captures (paths, refs) stay raw so
// their slashes survive and each handler decodes them per segment.
const DECODED_CAPTURES = 2;

export function createRouter({ decodeSegment }) {
  const routes = [];
  return {
    route(method, re, handler, { auth = false } = {}) {
      routes.push({ method, re, handler, auth });
    },
    match(method, path) {
      for (const route of routes) {
        const match = route.re.exec(path);
        if (!match || route.method !== method) continue;
        const params = match.slice(1).map((p, i) => (p !== undefined && i < DECODED_CAPTURES ? decodeSegment(p) : p));
        return { route, params };
      }
      return null;
    },
  };
}
