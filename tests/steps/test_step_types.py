"""Each step type of STEPS.md, run by the step interpreter on a real server.

Every outcome's history was also replayed through a fresh interpreter by the
harness (`check_history`)."""

from __future__ import annotations

from typing import Any

from sdk import AsyncClient
from tests.steps import activities as acts
from tests.steps.harness import run_steps, wait_for_marker


async def test_let_arithmetic_types_and_return(client: AsyncClient) -> None:
    out = await run_steps(
        client,
        """
        steps:
          - let integer x = 2
          - let y = ${x} * 3 + 1
          - let z = ${y} / 2
          - let string s = ${x}
          - let w = ${missing} ?? 10
          - let big = ${y} > 5 ? "big" : "small"
          - let m.inner = 4
          - type: return
            value:
              x: ${x}
              y: ${y}
              z: ${z}
              s: ${s}
              w: ${w}
              big: ${big}
              m: ${m}
              text: y is ${y}
        """,
    )
    assert out.result == {
        "x": 2,
        "y": 7,
        "z": 3.5,
        "s": "2",
        "w": 10,
        "big": "big",
        "m": {"inner": 4},
        "text": "y is 7",
    }
    assert out.types()[-1] == "WorkflowSuccess"


async def test_let_output_sets_the_step_output(client: AsyncClient) -> None:
    out = await run_steps(
        client,
        """
        steps:
          - let output = 5
          - let doubled = ${output} * 2
          - return ${doubled}
        """,
    )
    assert out.result == 10


async def test_each_step_start_is_a_marker_with_input_and_variables(client: AsyncClient) -> None:
    out = await run_steps(
        client,
        """
        steps:
          - let a = 1
          - id: second
            step: let b = ${a} + 1
            input: {note: hello}
          - return ${b}
        """,
    )
    steps = out.steps()
    assert [s["key"] for s in steps] == ["0.1", "1.1", "2.1"]
    assert steps[1]["id"] == "second"
    assert steps[1]["index"] == 1
    assert steps[1]["input"] == {"note": "hello"}
    assert steps[1]["variables"] == {"a": 1}
    assert steps[2]["variables"] == {"a": 1, "b": 2}
    assert out.result == 2


async def test_activity_output_flows_to_the_next_step(client: AsyncClient) -> None:
    out = await run_steps(
        client,
        """
        steps:
          - step: activity add
            input: {a: 2, b: 40}
          - let answer = ${output}
          - step: activity echo
            input: {answer: ${answer}, doubled: ${output}}
          - return ${output.answer}
        """,
        activities=acts.ALL,
    )
    assert out.result == 42
    scheduled = out.activities()
    assert [a["activity_type"]["name"] for a in scheduled] == ["add", "echo"]
    assert scheduled[0]["input"] == {"a": 2, "b": 40}
    assert scheduled[1]["input"] == {"answer": 42, "doubled": 42}
    assert [a["activity_id"] for a in scheduled] == ["0.1", "2.1"]


async def test_activity_failure_fails_the_workflow_with_the_step(client: AsyncClient) -> None:
    out = await run_steps(
        client,
        """
        steps:
          - step: activity explode
            input: {message: kaboom}
        """,
        activities=acts.ALL,
    )
    assert out.reason == "ActivityFailed"
    assert "kaboom" in out.details["message"]
    assert out.details["step"] == "step 1"


async def test_sleep_is_a_durable_timer(client: AsyncClient) -> None:
    out = await run_steps(client, "steps:\n  - sleep 200ms\n  - return done\n")
    assert out.result == "done"
    timers = out.of("TimerScheduled")
    assert len(timers) == 1
    assert timers[0].attributes["start_to_fire_timeout"] == 0.2
    assert "TimerExpired" in out.types()


async def test_log_passes_the_output_through(client: AsyncClient) -> None:
    out = await run_steps(
        client,
        """
        steps:
          - let output = 7
          - log the value is ${output}
          - return ${output}
        """,
    )
    assert out.result == 7
    assert out.steps()[1]["type"] == "log"


async def test_transform_pipeline(client: AsyncClient) -> None:
    out = await run_steps(
        client,
        """
        steps:
          - let raw = "  Hello World  "
          - transform t = ${raw} | trim | to_upper_case
          - return ${t}
        """,
    )
    assert out.result == "HELLO WORLD"


async def test_goto_and_label_loop_with_condition(client: AsyncClient) -> None:
    out = await run_steps(
        client,
        """
        steps:
          - let i = 0
          - label loop
          - let i = ${i} + 1
          - step: goto loop
            condition: {target: "${i}", less-than: 3}
          - return ${i}
        """,
    )
    assert out.result == 3
    # the goto ran twice; the third time its condition skipped it (no marker)
    assert [s["type"] for s in out.steps()].count("goto") == 2


async def test_next_jumps_and_end_finishes(client: AsyncClient) -> None:
    out = await run_steps(
        client,
        """
        steps:
          - step: let a = 1
            next: last_one
          - let a = 2
          - id: last_one
            step: let b = ${a} + 10
            next: end
          - let b = 0
        output: ${b}
        """,
    )
    assert out.result == 11


async def test_no_op_and_condition_skip(client: AsyncClient) -> None:
    out = await run_steps(
        client,
        """
        steps:
          - let flag = false
          - step: let skipped = yes
            condition: {target: "${flag}", equals: true}
          - no-op
          - let out = ${skipped} ?? "absent"
          - return ${out}
        """,
    )
    assert out.result == "absent"
    assert [s["type"] for s in out.steps()] == ["let", "no-op", "let", "return"]


async def test_fail_fails_the_workflow_with_its_message(client: AsyncClient) -> None:
    out = await run_steps(
        client,
        """
        input: {who: bob}
        steps:
          - fail message Request denied by ${input.who}
        """,
    )
    assert out.reason == "Fail"
    assert out.details["message"] == "Request denied by bob"


async def test_if_then_else(client: AsyncClient) -> None:
    out = await run_steps(
        client,
        """
        steps:
          - let n = 5
          - if ${n} == 5 then let r = five
          - type: if
            condition: {target: "${n}", greater-than: 10}
            then: let r2 = big
            else: let r2 = small
          - type: return
            value: {r: "${r}", r2: "${r2}"}
        """,
    )
    assert out.result == {"r": "five", "r2": "small"}


async def test_switch_picks_the_first_matching_case(client: AsyncClient) -> None:
    out = await run_steps(
        client,
        """
        input: {color: green}
        steps:
          - step: switch ${input.color}
            cases:
              - step: return stop
                condition: red
              - step: return go
                condition: green
              - return unknown
        """,
    )
    assert out.result == "go"


async def test_foreach_collects_outputs_with_concurrency(client: AsyncClient) -> None:
    out = await run_steps(
        client,
        """
        steps:
          - step: foreach n in ${input.numbers}
            concurrency: 3
            do:
              - step: activity add
                input: {a: "${n}", b: 100}
          - return ${output}
        """,
        input={"numbers": [1, 2, 3, 4, 5]},
        activities=acts.ALL,
    )
    assert out.result == [101, 102, 103, 104, 105]
    scheduled = out.of("ActivityScheduled")
    batches: dict[Any, int] = {}
    for event in scheduled:
        key = event.attributes["decider_completed_event_id"]
        batches[key] = batches.get(key, 0) + 1
    # the first decision schedules three at once; never more than three are open
    assert next(iter(batches.values())) == 3
    assert max(batches.values()) <= 3


async def test_foreach_reducing_threads_variables(client: AsyncClient) -> None:
    out = await run_steps(
        client,
        """
        steps:
          - step: foreach n in 1..4
            reducing: {total: 0}
            do:
              - let total = ${total} + ${n}
          - return ${total}
        """,
    )
    assert out.result == 10


async def test_nested_workflow_has_its_own_variables(client: AsyncClient) -> None:
    out = await run_steps(
        client,
        """
        steps:
          - let x = outer
          - type: workflow
            input: {given: "${x}"}
            steps:
              - let x = inner
              - return ${input.given}-${x}
          - type: return
            value: {child: "${output}", x: "${x}"}
        """,
    )
    assert out.result == {"child": "outer-inner", "x": "outer"}


async def test_nested_workflow_target_fans_out(client: AsyncClient) -> None:
    out = await run_steps(
        client,
        """
        steps:
          - type: workflow
            target: [a, b, c]
            concurrency: all
            steps:
              - let up = ${target}-${target_index}
              - return ${up}
        """,
    )
    assert out.result == ["a-0", "b-1", "c-2"]


async def test_wait_signal_returns_the_signal_input(client: AsyncClient) -> None:
    async def send(c: AsyncClient, workflow_id: str) -> None:
        await wait_for_marker(c, workflow_id, "wait")
        await c.signal(workflow_id, "approved", {"by": "alice"})

    out = await run_steps(
        client,
        """
        steps:
          - id: approval
            step: wait signal approved
          - return ${output.by}
        """,
        during=send,
    )
    assert out.result == "alice"


async def test_wait_signal_timeout_is_an_error(client: AsyncClient) -> None:
    out = await run_steps(client, "steps:\n  - wait signal never timeout 200ms\n")
    assert out.reason == "Timeout"
    assert "never" in out.details["message"]
    assert "TimerExpired" in out.types()


async def test_step_timeout_cancels_a_slow_activity(client: AsyncClient) -> None:
    out = await run_steps(
        client,
        """
        steps:
          - step: activity slow
            input: {seconds: 30}
            timeout: 500ms
            on-error:
              - step: let output = timed out
                condition: {error-type: Timeout}
          - return ${output}
        """,
        activities=acts.ALL,
    )
    assert out.result == "timed out"
    assert "ActivityCancelRequested" in out.types()
    assert out.of("ActivityCancelRequested")[0].attributes["activity_id"] == "0.1"


async def test_output_key_and_workflow_output(client: AsyncClient) -> None:
    out = await run_steps(
        client,
        """
        steps:
          - step: let x = 3
          - id: adder
            step: activity add
            input: {a: "${x}", b: 1}
            output: {sum: "${output}"}
          - let y = ${output.sum} * 10
        output:
          y: ${y}
          via_step: ${workflow.step.adder.output.sum}
        """,
        activities=acts.ALL,
    )
    assert out.result == {"y": 40, "via_step": 4}


async def test_parameters_defaults_types_and_required(client: AsyncClient) -> None:
    yaml_text = """
        parameters:
          size: {type: string, default: small}
          count: {type: integer, default: 2}
          owner: {type: string, required: true}
        steps:
          - type: return
            value: {size: "${input.size}", count: "${input.count}", owner: "${input.owner}"}
        """
    out = await run_steps(client, yaml_text, input={"owner": "ann", "count": "3"})
    assert out.result == {"size": "small", "count": 3, "owner": "ann"}
    missing = await run_steps(client, yaml_text, input={})
    assert missing.reason == "InvalidInput"
    assert "owner" in missing.details["message"]


async def test_expression_error_fails_only_its_step(client: AsyncClient) -> None:
    out = await run_steps(
        client,
        """
        steps:
          - step: let x = ${nope} + 1
            on-error:
              - let x = 0
          - let y = ${x} + 1
          - return ${y}
        """,
    )
    assert out.result == 1


async def test_unhandled_expression_error_fails_the_workflow(client: AsyncClient) -> None:
    out = await run_steps(client, "steps:\n  - let x = ${nope} + 1\n")
    assert out.reason == "ExpressionError"
    assert "nope" in out.details["message"]


async def test_http_calls_a_real_server(client: AsyncClient, http_server: str) -> None:
    out = await run_steps(
        client,
        f"""
        steps:
          - step: http {http_server}/echo
            input:
              method: POST
              body: {{size: small}}
          - return ${{output.content_json}}
        """,
        builtins=True,
    )
    assert out.result == {"method": "POST", "path": "/echo", "body": {"size": "small"}}


async def test_http_unexpected_status_is_an_activity_failure(
    client: AsyncClient, http_server: str
) -> None:
    out = await run_steps(
        client,
        f"""
        steps:
          - step: http {http_server}/missing
            on-error:
              - step: return ${{error.details.reason}}
                condition: {{error-type: ActivityFailed}}
        """,
        builtins=True,
    )
    assert out.result == "HttpStatusError"


async def test_shell_runs_a_command(client: AsyncClient) -> None:
    out = await run_steps(
        client,
        """
        steps:
          - step: shell echo "$GREETING" && exit 3
            input:
              env: {GREETING: hello}
              exit_code: 3
          - return ${output}
        """,
        builtins=True,
    )
    assert out.result == {"stdout": "hello\n", "stderr": "", "exit_code": 3}
