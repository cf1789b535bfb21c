// Reads of the bare repositories the API answers from: refs, commits, trees.

import { readGit } from './git.mjs';
import { isoSeconds, REF_RE } from './http.mjs';

export async function tryGit(dir, args) {
  try {
    return await readGit(dir, args);
  } catch {
    return null;
  }
}

export async function revParse(dir, rev) {
  const out = await tryGit(dir, ['rev-parse', '--verify', '--quiet', rev]);
  return out ? out.toString().trim() : null;
}

// Resolves a branch, tag, full ref or (abbreviated) sha to a commit sha, like GitHub's `ref`.
export async function resolveCommit(dir, ref) {
  if (typeof ref !== 'string' || !REF_RE.test(ref)) return null;
  const candidates = [`refs/heads/${ref}`, `refs/tags/${ref}`];
  if (ref.startsWith('refs/')) candidates.unshift(ref);
  if (/^[0-9a-f]{4,40}$/i.test(ref)) candidates.push(ref.toLowerCase());
  for (const candidate of candidates) {
    const sha = await revParse(dir, `${candidate}^{commit}`);
    if (sha) return sha;
  }
  return null;
}

export async function defaultBranch(dir) {
  const out = await tryGit(dir, ['symbolic-ref', '--short', 'HEAD']);
  return out ? out.toString().trim() : 'main';
}

// `git ls-tree -z -l` lines: "<mode> <type> <sha> <size>\t<path>".
export function parseLsTree(buf) {
  return buf
    .toString('utf8')
    .split('\0')
    .filter(Boolean)
    .map((line) => {
      const tab = line.indexOf('\t');
      const [mode, type, sha, size] = line.slice(0, tab).trim().split(/\s+/);
      return { mode, type, sha, size: size === '-' ? 0 : Number(size), path: line.slice(tab + 1) };
    });
}

export function parseSignature(line) {
  const match = /^(.*) <(.*)> (\d+) [+-]\d{4}$/.exec(line ?? '');
  if (!match) return null;
  return { name: match[1], email: match[2], date: isoSeconds(Number(match[3]) * 1000) };
}

export async function readCommit(dir, sha) {
  const text = (await readGit(dir, ['cat-file', 'commit', sha])).toString('utf8');
  const split = text.indexOf('\n\n');
  const headers = text.slice(0, split).split('\n');
  const field = (name) => headers.filter((h) => h.startsWith(`${name} `)).map((h) => h.slice(name.length + 1));
  return {
    tree: field('tree')[0],
    parents: field('parent'),
    author: parseSignature(field('author')[0]),
    committer: parseSignature(field('committer')[0]),
    message: split === -1 ? '' : text.slice(split + 2).replace(/\n$/, ''),
  };
}

export function wrapBase64(buf) {
  const b64 = buf.toString('base64');
  // GitHub (Ruby's Base64.encode64) breaks lines every 60 characters and ends with a newline.
  return b64 ? `${b64.match(/.{1,60}/g).join('\n')}\n` : '';
}
