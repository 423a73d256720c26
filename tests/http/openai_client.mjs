// Drives DiLaServe's HTTP API with the official openai client, as a user would.
//   node openai_client.mjs check FILE        completions, chat and streaming per problem
//   node openai_client.mjs concurrent FILE N N streaming chat clients at once
// FILE is JSON: [{prompt, gen_length, expected}], expected being the reference answer.
// The base URL and key come from DLS_HTTP_URL and DLS_HTTP_KEY. Exits non-zero on any
// wrong answer or error, naming it.
import OpenAI from 'openai';
import { readFileSync } from 'node:fs';

const [mode, file, count] = process.argv.slice(2);
const problems = JSON.parse(readFileSync(file, 'utf8'));
const client = new OpenAI({ baseURL: process.env.DLS_HTTP_URL, apiKey: process.env.DLS_HTTP_KEY,
                            maxRetries: 0, timeout: 120_000 });
const models = await client.models.list();
const model = models.data[0].id;
let failures = 0;

function expectEqual(what, got, want) {
  if (got !== want) {
    failures++;
    console.error(`FAIL ${what}: got ${JSON.stringify(got)}, want ${JSON.stringify(want)}`);
  }
}

async function streamChat(p) {
  const stream = await client.chat.completions.create({
    model, messages: [{ role: 'user', content: p.prompt }], stream: true, gen_length: p.gen_length,
    stream_options: { include_usage: true } });
  let text = '', chunks = 0, finish = null, usage = null, extras = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    if (chunk.choices.length === 0) continue;
    const c = chunk.choices[0];
    if (c.delta && c.delta.content) text += c.delta.content;
    if (c.finish_reason) { finish = c.finish_reason; extras = chunk.dilaserve; } else chunks++;
  }
  return { text, chunks, finish, usage, extras };
}

if (mode === 'check') {
  for (const [i, p] of problems.entries()) {
    const c = await client.completions.create({ model, prompt: p.prompt, gen_length: p.gen_length });
    expectEqual(`completion ${i}`, c.choices[0].text, p.expected);
    if (c.object !== 'text_completion' || !c.id.startsWith('cmpl-') || !(c.created > 0)) {
      failures++; console.error(`FAIL completion ${i}: bad envelope ${JSON.stringify(c)}`);
    }
    if (c.usage.prompt_tokens !== [...p.prompt].length || c.usage.completion_tokens !== [...p.expected].length) {
      failures++; console.error(`FAIL completion ${i}: usage ${JSON.stringify(c.usage)}`);
    }
    if (!(c.dilaserve.steps > 0) || !(c.dilaserve.tokens_per_step > 0) || !c.dilaserve.group) {
      failures++; console.error(`FAIL completion ${i}: extras ${JSON.stringify(c.dilaserve)}`);
    }
    const chat = await client.chat.completions.create({
      model, messages: [{ role: 'system', content: 'ignored' }, { role: 'user', content: p.prompt }],
      extra_body: { gen_length: p.gen_length } });
    expectEqual(`chat ${i}`, chat.choices[0].message.content, p.expected);
    expectEqual(`chat ${i} object`, chat.object, 'chat.completion');
    const s = await streamChat(p);
    expectEqual(`stream ${i}`, s.text, p.expected);
    // The runtime sends a block once it adds text: blocks after the end are empty.
    expectEqual(`stream ${i} chunks (one per block)`, s.chunks, Math.ceil([...p.expected].length / 8));
    if (!s.finish || !s.usage || !s.extras) {
      failures++; console.error(`FAIL stream ${i}: finish ${s.finish} usage ${JSON.stringify(s.usage)}`);
    }
  }
  // max_tokens cuts the answer and says so.
  const p = problems.find((q) => [...q.expected].length >= 3);
  const cut = await client.completions.create({ model, prompt: p.prompt, gen_length: p.gen_length, max_tokens: 2 });
  expectEqual('max_tokens text', cut.choices[0].text, [...p.expected].slice(0, 2).join(''));
  expectEqual('max_tokens finish_reason', cut.choices[0].finish_reason, 'length');
  // A stop sequence ends it before the sequence, streamed or not.
  const stop = p.expected.slice(1, 2);
  const want = p.expected.slice(0, p.expected.indexOf(stop));
  const st = await client.completions.create({ model, prompt: p.prompt, gen_length: p.gen_length, stop: [stop] });
  expectEqual('stop text', st.choices[0].text, want);
  expectEqual('stop finish_reason', st.choices[0].finish_reason, 'stop');
  // Streamed, the same stop sequence ends the stream at the same place.
  const ss = await client.completions.create({ model, prompt: p.prompt, gen_length: p.gen_length, stop: [stop],
                                              stream: true });
  let streamed = '', streamedFinish = null;
  for await (const chunk of ss) {
    streamed += chunk.choices[0].text;
    if (chunk.choices[0].finish_reason) streamedFinish = chunk.choices[0].finish_reason;
  }
  expectEqual('streamed stop text', streamed, want);
  expectEqual('streamed stop finish_reason', streamedFinish, 'stop');
  // Errors come back as the client's typed errors.
  try {
    await client.completions.create({ model, prompt: p.prompt, priority: 5 });
    failures++; console.error('FAIL priority was accepted');
  } catch (e) {
    expectEqual('priority status', e.status, 400);
    expectEqual('priority param', e.param, 'priority');
  }
  console.log(`checked ${problems.length} problems three ways`);
} else if (mode === 'concurrent') {
  const n = Number(count);
  const t0 = Date.now();
  const results = await Promise.allSettled(
    Array.from({ length: n }, (_, i) => streamChat(problems[i % problems.length])));
  results.forEach((r, i) => {
    if (r.status === 'rejected') { failures++; console.error(`FAIL client ${i}: ${r.reason}`); return; }
    expectEqual(`client ${i}`, r.value.text, problems[i % problems.length].expected);
  });
  console.log(`${n} concurrent streams in ${Date.now() - t0} ms, ${failures} failures`);
} else {
  console.error(`unknown mode ${mode}`);
  process.exit(2);
}
process.exit(failures === 0 ? 0 : 1);
