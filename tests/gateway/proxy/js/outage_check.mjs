// @azure/service-bus through a geogateway proxy while the primary namespace goes down
// and comes back. Usage: node outage_check.mjs CONNECTION_STRING QUEUE COUNT
// Writes "step NAME" to stderr as each step begins; "control down" / "control up" to
// stdout, then waits for a line on stdin (the test took the primary down / up).
// Prints "ok SENT RECEIVED DUPLICATES" at the end; exits 1 on the first SDK error.
import { createRequire } from "node:module";
import path from "node:path";
import readline from "node:readline";

const require = createRequire(path.join(process.env.JSSDK_PREFIX ?? ".jssdk", "node_modules", "x.js"));
const { ServiceBusClient } = require("@azure/service-bus");

const [cs, queue, countArg] = process.argv.slice(2);
const count = Number(countArg);
const lines = readline.createInterface({ input: process.stdin })[Symbol.asyncIterator]();
const step = (name) => process.stderr.write(`step ${name}\n`);

async function control(what) {
  step(`primary ${what}`);
  process.stdout.write(`control ${what}\n`);
  await lines.next();
}

async function main() {
  const sb = new ServiceBusClient(cs, { retryOptions: { maxRetries: 3, retryDelayInMs: 200 } });
  const sender = sb.createSender(queue);
  for (let i = 0; i < count; i++) {
    if (i === Math.floor(count / 3)) await control("down");
    if (i === Math.floor((2 * count) / 3)) await control("up");
    step(`send m${i}`);
    await sender.sendMessages({ body: `body ${i}`, messageId: `m${i}` });
  }
  await sender.close();
  const receiver = sb.createReceiver(queue);
  const seen = new Map();
  let empty = 0;
  while (empty < 3) {
    step(`receive (${seen.size} of ${count})`);
    const got = await receiver.receiveMessages(50, { maxWaitTimeInMs: 1000 });
    empty = got.length === 0 ? empty + 1 : 0;
    for (const m of got) {
      seen.set(m.messageId, (seen.get(m.messageId) ?? 0) + 1);
      await receiver.completeMessage(m);
    }
  }
  await receiver.close();
  await sb.close();
  let duplicates = 0;
  for (const n of seen.values()) duplicates += n - 1;
  process.stdout.write(`ok ${count} ${seen.size} ${duplicates}\n`);
  process.exit(0);
}

main().catch((err) => {
  process.stderr.write(`error ${err?.stack ?? err}\n`);
  process.exit(1);
});
