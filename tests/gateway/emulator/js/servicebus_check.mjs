// The unmodified JavaScript SDKs (@azure/service-bus, @azure/event-hubs) against the
// emulator. Usage: node servicebus_check.mjs CONNECTION_STRING
// Entities (declared by the pytest test that runs this): queues basic, dlq, defer,
// rnd, big, sched; session queue workflows; topic news (subscriptions a, b); event hub
// telemetry (2 partitions). Exits 1 with a message on the first SDK error, differing check or
// step that takes more than 20 s; writes "step NAME" to stderr as each step begins.
import { createRequire } from "node:module";
import path from "node:path";

const require = createRequire(path.join(process.env.JSSDK_PREFIX ?? ".jssdk", "node_modules", "x.js"));
const { ServiceBusClient } = require("@azure/service-bus");
const { EventHubProducerClient, EventHubConsumerClient, earliestEventPosition } =
  require("@azure/event-hubs");

const cs = process.argv[2];
const WAIT = { maxWaitTimeInMs: 2000 };

function check(what, got, want) {
  const g = JSON.stringify(got), w = JSON.stringify(want);
  if (g !== w) throw new Error(`${what}: got ${g}, expected ${w}`);
}

async function basic(sb) {
  const sender = sb.createSender("basic");
  await sender.sendMessages({ body: "one", messageId: "m1", applicationProperties: { k: 7 } });
  const batch = await sender.createMessageBatch();
  for (const id of ["b1", "b2"]) check("batch add", batch.tryAddMessage({ body: id, messageId: id }), true);
  await sender.sendMessages(batch);
  const r = sb.createReceiver("basic");
  const got = await r.receiveMessages(3, WAIT);
  check("received bodies", got.map((m) => m.body), ["one", "b1", "b2"]);
  check("application property", got[0].applicationProperties.k, 7);
  const before = got[1].lockedUntilUtc.getTime();
  await new Promise((res) => setTimeout(res, 20));
  const until = await r.renewMessageLock(got[1]);
  if (!(until.getTime() > before)) throw new Error(`renewed lock ${until} not after ${got[1].lockedUntilUtc}`);
  await r.completeMessage(got[0]);
  await r.completeMessage(got[2]);
  await r.abandonMessage(got[1]);
  const [again] = await r.receiveMessages(1, WAIT);
  check("redelivered", [again.messageId, again.deliveryCount], ["b1", 1]);
  await r.completeMessage(again);
  check("empty after complete", (await r.peekMessages(5)).length, 0);
  await r.close();
  await sender.close();
}

async function scheduled(sb) {
  const sender = sb.createSender("sched");
  const soon = new Date(Date.now() + 1500), later = new Date(Date.now() + 3600_000);
  const [keep] = await sender.scheduleMessages({ body: "soon", messageId: "s1" }, soon);
  const [drop] = await sender.scheduleMessages({ body: "never", messageId: "s2" }, later);
  await sender.cancelScheduledMessages([drop]);
  const r = sb.createReceiver("sched");
  check("nothing before its time", (await r.receiveMessages(1, { maxWaitTimeInMs: 300 })).length, 0);
  const got = await r.receiveMessages(2, { maxWaitTimeInMs: 4000 });
  check("scheduled arrives, cancelled not", got.map((m) => m.messageId), ["s1"]);
  check("sequence number", got[0].sequenceNumber.toString(), keep.toString());
  await r.completeMessage(got[0]);
  await r.close();
  await sender.close();
}

async function deadLetter(sb) {
  const sender = sb.createSender("dlq");
  await sender.sendMessages({ body: "bad", messageId: "d1" });
  const r = sb.createReceiver("dlq");
  const [m] = await r.receiveMessages(1, WAIT);
  await r.deadLetterMessage(m, { deadLetterReason: "why", deadLetterErrorDescription: "because" });
  const dl = sb.createReceiver("dlq", { subQueueType: "deadLetter" });
  const [d] = await dl.receiveMessages(1, WAIT);
  check("dead letter", [d.messageId, d.deadLetterReason, d.deadLetterErrorDescription],
    ["d1", "why", "because"]);
  await dl.completeMessage(d);
  await Promise.all([r.close(), dl.close(), sender.close()]);
}

async function deferred(sb) {
  const sender = sb.createSender("defer");
  await sender.sendMessages([{ body: "x", messageId: "f1" }, { body: "y", messageId: "f2" }]);
  const r = sb.createReceiver("defer");
  const got = await r.receiveMessages(2, WAIT);
  for (const m of got) await r.deferMessage(m);
  check("deferred not received", (await r.receiveMessages(1, { maxWaitTimeInMs: 300 })).length, 0);
  const back = await r.receiveDeferredMessages(got.map((m) => m.sequenceNumber));
  check("deferred by sequence number", back.map((m) => m.messageId).sort(), ["f1", "f2"]);
  for (const m of back) await r.completeMessage(m);
  await Promise.all([r.close(), sender.close()]);
}

async function receiveAndDelete(sb) {
  const sender = sb.createSender("rnd");
  await sender.sendMessages({ body: "gone", messageId: "r1" });
  const r = sb.createReceiver("rnd", { receiveMode: "receiveAndDelete" });
  const [m] = await r.receiveMessages(1, WAIT);
  check("receive and delete", m.messageId, "r1");
  check("deleted", (await r.peekMessages(5)).length, 0);
  await Promise.all([r.close(), sender.close()]);
}

async function big(sb) {
  const sender = sb.createSender("big");
  const body = Buffer.alloc(200 * 1024, 7);
  await sender.sendMessages({ body, messageId: "big" });
  const r = sb.createReceiver("big");
  const [m] = await r.receiveMessages(1, WAIT);
  check("200 KB body", [m.messageId, Buffer.from(m.body).equals(body)], ["big", true]);
  await r.completeMessage(m);
  await Promise.all([r.close(), sender.close()]);
}

async function sessions(sb) {
  const sender = sb.createSender("workflows");
  await sender.sendMessages(["a", "b", "a"].map((s, i) => ({ body: `${s}${i}`, sessionId: s })));
  const r = await sb.acceptSession("workflows", "a");
  await r.setSessionState("step-2");
  check("session state", (await r.getSessionState()).toString(), "step-2");
  const before = r.sessionLockedUntilUtc.getTime();
  await new Promise((res) => setTimeout(res, 20));
  const until = await r.renewSessionLock();
  if (!(until.getTime() > before)) throw new Error("session lock not renewed");
  const got = await r.receiveMessages(5, WAIT);
  check("session a in order", got.map((m) => m.body), ["a0", "a2"]);
  for (const m of got) await r.completeMessage(m);
  await r.close();
  const next = await sb.acceptNextSession("workflows");
  check("next session", next.sessionId, "b");
  const [b] = await next.receiveMessages(1, WAIT);
  await next.completeMessage(b);
  await Promise.all([next.close(), sender.close()]);
}

async function topic(sb) {
  const sender = sb.createSender("news");
  await sender.sendMessages({ body: "headline", messageId: "t1" });
  for (const sub of ["a", "b"]) {
    const r = sb.createReceiver("news", sub);
    const [m] = await r.receiveMessages(1, WAIT);
    check(`subscription ${sub}`, m?.messageId, "t1");
    await r.completeMessage(m);
    await r.close();
  }
  await sender.close();
}

async function eventHubs() {
  const producer = new EventHubProducerClient(cs, "telemetry");
  check("partition ids", await producer.getPartitionIds(), ["0", "1"]);
  const batch = await producer.createBatch({ partitionId: "1" });
  for (const n of [1, 2, 3]) batch.tryAdd({ body: `e${n}`, properties: { n } });
  await producer.sendBatch(batch);
  const props = await producer.getPartitionProperties("1");
  check("partition properties", [props.partitionId, props.lastEnqueuedSequenceNumber,
    props.isEmpty], ["1", props.beginningSequenceNumber + 2, false]);
  await producer.close();
  const consumer = new EventHubConsumerClient("$Default", cs, "telemetry");
  const got = [];
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`events read: ${JSON.stringify(got)}`)), 8000);
    const sub = consumer.subscribe("1", {
      processEvents: async (events) => {
        for (const e of events) got.push([e.body, e.properties.n]);
        if (got.length >= 3) { clearTimeout(timer); sub.close().then(resolve, reject); }
      },
      processError: async (err) => { clearTimeout(timer); sub.close(); reject(err); },
    }, { startPosition: earliestEventPosition, maxWaitTimeInSeconds: 1 });
  });
  check("events of partition 1", got, [["e1", 1], ["e2", 2], ["e3", 3]]);
  await consumer.close();
}

// A step that neither finishes nor fails within this is reported as stalled.
const STEP_LIMIT_MS = 20_000;

function limited(name, promise) {
  let timer;
  const stalled = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${name} did not finish within ${STEP_LIMIT_MS} ms`)),
      STEP_LIMIT_MS);
  });
  return Promise.race([promise, stalled]).finally(() => clearTimeout(timer));
}

const sb = new ServiceBusClient(cs, { retryOptions: { maxRetries: 0, timeoutInMs: 10000 } });
const steps = { basic, scheduled, deadLetter, deferred, receiveAndDelete, big, sessions, topic };
let step = "";
try {
  const times = [];
  for (const [name, run] of Object.entries({ ...steps, eventHubs: () => eventHubs() })) {
    step = name;
    console.error(`step ${name}`); // the test shows the last one when the script stalls
    const t0 = Date.now();
    await limited(name, run(sb));
    times.push(`${name} ${Date.now() - t0} ms`);
  }
  console.error(times.join(", "));
  await sb.close();
  console.log("ok");
  process.exit(0);
} catch (err) {
  console.error(`FAILED in ${step}: ${err?.stack ?? err}`);
  process.exit(1);
}
