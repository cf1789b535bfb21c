// The end-to-end tests' entry to the stack harness, which lives in tools/stack/ (shared with the
// scripts: bench, soak, demo, start). The stacks it starts give the Worker ACK_FIRST: 'on', as
// `npm start` does (tools/stack/stack.mjs; src/http/ack_first.rs checks that this file says so).

export { APP_ID, INSTALLATION_ID, TERMINAL, logTail, rawRequest, startStack, waitFor } from '../../tools/stack/index.mjs';
