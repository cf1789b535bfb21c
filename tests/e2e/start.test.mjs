// `npm start`'s choices that need no stack: its local sandbox agent allows checkouts from exactly
// where the Worker clones (GITHUB_GIT_URL, `github::clone_url`), so an App on a GitHub Enterprise
// Server configured in .dev.vars checks out from that server, not from github.com.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { GIT_URL_DEFAULT, gitUrlPrefix, localAgentGitUrlPrefixes } from '../../tools/stack/index.mjs';

test("npm start's agent allows clones from GITHUB_GIT_URL as the Worker reads it", () => {
  const ghes = { GITHUB_API_URL: 'https://ghe.example.com/api/v3', GITHUB_APP_ID: '7', GITHUB_GIT_URL: 'https://ghe.example.com/' };
  assert.deepEqual(localAgentGitUrlPrefixes(ghes, {}), ['https://ghe.example.com/'], 'a GitHub Enterprise Server');
  assert.deepEqual(localAgentGitUrlPrefixes({ GITHUB_APP_ID: '7' }, {}), ['https://github.com/'], 'a real App on github.com');
  const standin = { GITHUB_GIT_URL: 'http://127.0.0.1:8790' };
  assert.deepEqual(localAgentGitUrlPrefixes({}, standin), ['http://127.0.0.1:8790/'], 'the stand-in npm start runs');
  assert.deepEqual(localAgentGitUrlPrefixes({ GITHUB_GIT_URL: 'https://ghe.example.com' }, standin), ['https://ghe.example.com/'],
    '.dev.vars wins over the defaults, as wrangler reads them');
  // The prefix is the Worker's clone URL base: `<git url>/<owner>/<name>.git` starts with it.
  for (const url of [GIT_URL_DEFAULT, 'https://ghe.example.com/', 'http://127.0.0.1:8790//']) {
    const clone = `${url.replace(/\/+$/, '')}/acme/web.git`;
    assert.ok(clone.startsWith(gitUrlPrefix(url)), `${clone} under ${gitUrlPrefix(url)}`);
  }
});
