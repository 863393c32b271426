// A client of toc typed only by the types openapi-typescript generates from
// internal/openapi/openapi.json (gen/toc.d.ts), called through openapi-fetch.
// tsc (strict, npm run build) type-checking it is the check that the description is usable from
// TypeScript without casts; running it (TOC_URL=http://127.0.0.1:7070 node
// dist/client.js; internal/openapi's TestTypeScriptClient does) checks that
// the server answers as the types say: it creates, gets, patches (sending
// null to clear a field), cancels, claims and acks tasks, and creates and
// patches a schedule.
import createClient from "openapi-fetch";
import type { components, paths } from "./gen/toc.d.ts";

type Task = components["schemas"]["Task"];
type ClaimedTask = components["schemas"]["ClaimedTask"];
type CreateTask = components["schemas"]["CreateTask"];

const baseUrl = process.env.TOC_URL;
if (!baseUrl) {
  throw new Error("set TOC_URL to a toc server, like http://127.0.0.1:7070");
}
const token = process.env.TOC_TOKEN;
const toc = createClient<paths>({
  baseUrl,
  headers: token ? { Authorization: `Bearer ${token}` } : {},
});

// A run's own keys, so that runs against one server do not meet.
const run = Date.now().toString(36);
const app = process.env.TOC_APP ?? "shop";

function check(cond: boolean, what: string): asserts cond {
  if (!cond) throw new Error(what);
}

// must returns data of a call that must succeed, with its status.
async function must<T>(
  what: string,
  call: Promise<{ data?: T; error?: unknown; response: Response }>,
  status: number,
): Promise<T> {
  const { data, error, response } = await call;
  check(
    response.status === status,
    `${what}: status ${response.status}, want ${status}: ${JSON.stringify(error)}`,
  );
  check(response.headers.get("X-Request-Id") !== null, `${what}: no X-Request-Id`);
  return data as T;
}

async function main(): Promise<void> {
  // Create: exactly one of due_at and delay (the type requires one).
  const body: CreateTask = {
    app,
    key: `ts-${run}-later`,
    delay: "1h",
    payload: { order: 1234 },
    target: { pull: {} },
    deadline: "2099-01-01T00:00:00Z",
  };
  const created: Task = await must("create", toc.POST("/v1/tasks", { body }), 201);
  check(created.state === "scheduled", `created task is ${created.state}`);
  // The same key again: 200 with the same task.
  const again = await must("create again", toc.POST("/v1/tasks", { body }), 200);
  check(again.id === created.id, "a repeated create made another task");

  const id = { params: { path: { id: created.id } } };
  const got = await must("get", toc.GET("/v1/tasks/{id}", id), 200);
  check(got.deadline !== undefined, "the deadline was not kept");

  // Patch: a new due time, then the deadline cleared with null.
  const moved = await must(
    "patch",
    toc.PATCH("/v1/tasks/{id}", { ...id, body: { due_at: "2098-01-01T00:00:00Z", payload_base64: "aGk=" } }),
    200,
  );
  check(moved.due_at.startsWith("2098-01-01"), `patched due_at is ${moved.due_at}`);
  const cleared = await must("patch null", toc.PATCH("/v1/tasks/{id}", { ...id, body: { deadline: null } }), 200);
  check(cleared.deadline === undefined, `deadline after null: ${cleared.deadline}`);

  // A task of another state refuses the patch with 409 and carries the task.
  await must("cancel", toc.DELETE("/v1/tasks/{id}", id), 204);
  const refused = await toc.PATCH("/v1/tasks/{id}", { ...id, body: { delay: "1m" } });
  check(refused.response.status === 409, `patch of a cancelled task: ${refused.response.status}`);
  check(refused.error?.task?.state === "cancelled", `409's task: ${JSON.stringify(refused.error)}`);

  // Pull: a task due now, claimed and acked with its lease (required in
  // ClaimedTask: no cast).
  const due = await must(
    "create due",
    toc.POST("/v1/tasks", { body: { app, key: `ts-${run}-now`, delay: "0s", payload: { job: 1 }, target: { pull: {} } } }),
    201,
  );
  let claimed: ClaimedTask | undefined;
  for (let i = 0; i < 20 && !claimed; i++) {
    const list = await must(
      "claim",
      toc.POST("/v1/apps/{app}/claim", { params: { path: { app } }, body: { max: 10, lease: "30s", wait: "1s" } }),
      200,
    );
    // Tasks of other runs claimed here are left to their lease.
    claimed = list.tasks.find((t) => t.id === due.id);
  }
  check(claimed !== undefined, "the due task was never claimed");
  const lease: string = claimed.lease;
  const expires: string = claimed.lease_expires_at;
  check(Date.parse(expires) > Date.now(), `lease expires at ${expires}`);
  await must(
    "ack",
    toc.POST("/v1/tasks/{id}/ack", { params: { path: { id: claimed.id } }, body: { lease } }),
    204,
  );
  const delivered = await must("get acked", toc.GET("/v1/tasks/{id}", { params: { path: { id: due.id } } }), 200);
  check(delivered.state === "delivered", `acked task is ${delivered.state}`);

  // A schedule: exactly one of cron and every; its end cleared with null.
  const sched = await must(
    "create schedule",
    toc.POST("/v1/schedules", {
      body: { app, key: `ts-${run}`, every: "1h", end_at: "2099-01-01T00:00:00Z", target: { pull: {} } },
    }),
    201,
  );
  const patched = await must(
    "patch schedule",
    toc.PATCH("/v1/schedules/{id}", { params: { path: { id: sched.id } }, body: { end_at: null, deadline_after: null } }),
    200,
  );
  check(patched.end_at === undefined, `end_at after null: ${patched.end_at}`);
  await must("delete schedule", toc.DELETE("/v1/schedules/{id}", { params: { path: { id: sched.id } } }), 204);

  console.log(`ok: task ${created.id} created, patched, cancelled; task ${due.id} claimed and acked; schedule ${sched.id}`);
}

main().catch((err: unknown) => {
  console.error(err instanceof Error ? err.message : err);
  process.exit(1);
});
