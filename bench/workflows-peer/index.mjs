// The Workflows peer for `npm run bench`: the same probe Sluice's engine
// runs (N no-op steps, an optional sleep, an optional event wait), with
// timestamps taken inside steps so both sides are timed by the server.
import { WorkflowEntrypoint } from 'cloudflare:workers';

export class PeerWorkflow extends WorkflowEntrypoint {
  async run(event, step) {
    const p = event.payload;
    for (let i = 0; i < p.steps; i++) {
      await step.do(`step ${i}`, async () => i);
    }
    const out = { done_ms: null, before_sleep_ms: null, after_sleep_ms: null, after_event_ms: null };
    if (p.sleepMs) {
      out.before_sleep_ms = await step.do('before sleep', async () => Date.now());
      await step.sleep('nap', p.sleepMs);
      out.after_sleep_ms = await step.do('after sleep', async () => Date.now());
    }
    if (p.waitEvent) {
      // Marks "about to wait": local status shows "running" while waiting.
      await step.do('before wait', async () => 'waiting');
      await step.waitForEvent('wait', { type: p.waitEvent, timeout: '10 minutes' });
      out.after_event_ms = await step.do('after event', async () => Date.now());
    }
    out.done_ms = await step.do('finish', async () => Date.now());
    return out;
  }
}

const json = (v, status = 200) => new Response(JSON.stringify(v), { status, headers: { 'content-type': 'application/json' } });

export default {
  async fetch(req, env) {
    const url = new URL(req.url);
    const id = url.searchParams.get('id');
    if (url.pathname === '/create' && req.method === 'POST') {
      const params = await req.json();
      const created_ms = Date.now();
      const instance = await env.PEER.create({ id, params });
      return json({ id: instance.id, created_ms });
    }
    if (url.pathname === '/status') {
      const instance = await env.PEER.get(id);
      return json(await instance.status());
    }
    if (url.pathname === '/event' && req.method === 'POST') {
      const instance = await env.PEER.get(id);
      const sent_ms = Date.now();
      await instance.sendEvent({ type: url.searchParams.get('type'), payload: { at: sent_ms } });
      return json({ sent_ms });
    }
    return json({ error: 'not found' }, 404);
  },
};
