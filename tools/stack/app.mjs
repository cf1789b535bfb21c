// The GitHub App a stack plays: its ids at the stand-in, and an installation token minted the way
// the Worker mints them.

import { createSign } from 'node:crypto';
import { REQUEST_TIMEOUT_MS } from './requests.mjs';

export const APP_ID = 4242;
export const INSTALLATION_ID = 42;

// Signs an App JWT (RS256, GitHub's claims) and trades it for a repository-scoped token.
export async function mintInstallationToken(standinUrl, privateKeyPem, repoName) {
  const now = Math.floor(Date.now() / 1000);
  const part = (o) => Buffer.from(JSON.stringify(o)).toString('base64url');
  const unsigned = `${part({ alg: 'RS256', typ: 'JWT' })}.${part({ iat: now - 60, exp: now + 540, iss: String(APP_ID) })}`;
  const signature = createSign('RSA-SHA256').update(unsigned).sign(privateKeyPem).toString('base64url');
  const res = await fetch(`${standinUrl}/app/installations/${INSTALLATION_ID}/access_tokens`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${unsigned}.${signature}`, Accept: 'application/vnd.github+json', 'Content-Type': 'application/json' },
    body: JSON.stringify({ repositories: [repoName], permissions: { contents: 'read' } }),
    signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
  });
  if (res.status !== 201) throw new Error(`installation token: HTTP ${res.status} ${await res.text()}`);
  return (await res.json()).token;
}
