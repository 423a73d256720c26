#include "gateway/completion_route.hpp"
#include "gateway/json_text.hpp"

#include "gateway/answer_error.hpp"
#include "gateway/api_error.hpp"
#include "gateway/openai_response.hpp"
#include "gateway/output_filter.hpp"

#include <httplib.h>

#include <chrono>

namespace dls::gateway {

namespace rt = dls::runtime;
using json = nlohmann::json;
using clock_type = std::chrono::steady_clock;

namespace {

// How long a stream may be silent before the gateway probes the connection with an SSE
// comment: a client that went away is noticed (and its request withdrawn) within about
// two probes, and clients ignore comments.
constexpr auto idle_probe_interval = std::chrono::milliseconds(500);

double seconds_since(clock_type::time_point t) {
  return std::chrono::duration<double>(clock_type::now() - t).count();
}

struct prepared {
  completion_request req;
  rt::submit_spec spec;
  std::size_t prompt_tokens = 0;
};

prepared prepare(gateway_context& ctx, const httplib::Request& http_req, bool chat) {
  prepared p;
  p.req = parse_completion(http_req.body, chat, ctx.facts);
  if (chat && ctx.chat) {
    auto messages = nlohmann::ordered_json::array();
    for (const auto& [role, text] : p.req.messages) messages.push_back({{"role", role}, {"content", text}});
    try {
      p.req.prompt = ctx.chat->render(messages, true);
    } catch (const std::exception& e) {
      throw api_error(400, std::string("messages: the model's chat template refused this conversation: ") + e.what(),
                      "messages");
    }
    if (!ctx.end_of_turn.empty()) p.req.stop.push_back(ctx.end_of_turn);  // the answer's turn ends there
  }
  // The head endpoint's own bounds (limits:), checked here first so that a refusal is a
  // 413 naming the field rather than a failed answer.
  if (auto why = ctx.limits.check(p.req.prompt, p.req.threshold, p.req.gen_length); !why.empty()) {
    bool about_prompt = why.find("prompt") != std::string::npos;
    throw api_error(about_prompt || why.find("exceeds") != std::string::npos ? 413 : 400, why,
                    about_prompt ? p.req.prompt_field : "gen_length", about_prompt ? "context_length_exceeded" : "");
  }
  p.prompt_tokens = ctx.tokenizer->encode(p.req.prompt).size();
  if (!ctx.view.has_live_group()) throw api_error(503, "the cluster has no live TP group to serve the request");
  p.spec.prompt = p.req.prompt;
  p.spec.threshold = p.req.threshold;
  p.spec.min_threshold = p.req.min_threshold;
  p.spec.reject_on_miss = p.req.reject_on_miss;
  p.spec.slo_ms = p.req.slo_ms;
  p.spec.gen_length = p.req.gen_length;
  p.spec.top_p = p.req.top_p;
  p.spec.top_k = p.req.top_k;
  p.spec.alg_temp = p.req.alg_temp;
  p.spec.schedule = p.req.schedule;
  p.spec.eps = p.req.eps;
  p.spec.rule = p.req.rule;
  p.spec.steps_per_block = p.req.steps_per_block;
  return p;
}

output_filter make_filter(gateway_context& ctx, const completion_request& req) {
  auto* tok = ctx.tokenizer.get();
  return output_filter(
      req.stop, req.max_tokens, [tok](const std::string& s) { return tok->encode(s).size(); },
      [tok](const std::string& s, std::size_t n) {
        auto ids = tok->encode(s);
        ids.resize(std::min(ids.size(), n));
        return tok->decode(ids);
      });
}

// "length" also when the answer filled gen_length without ending by itself.
std::string finish_reason(const output_filter& f, std::size_t completion_tokens, const completion_request& req) {
  if (f.finish_reason() == "stop" && !f.hit_stop() && completion_tokens >= static_cast<std::size_t>(req.gen_length))
    return "length";
  return f.finish_reason();
}

void serve_whole(gateway_context& ctx, prepared p, httplib::Response& res, clock_type::time_point start) {
  auto deadline = start + std::chrono::seconds(ctx.http.request_timeout_s);
  auto call = ctx.bridge.open_call(p.spec);
  rt::answer a;
  for (;;) {
    if (ctx.stopping) throw api_error(503, "the gateway is shutting down");
    if (clock_type::now() > deadline) {
      a.error = "timed out after " + std::to_string(ctx.http.request_timeout_s) + " s";
      throw answer_error(a);  // destroying the call withdraws the request
    }
    auto ev = call->next(idle_probe_interval);
    if (ev.kind == stream_call::event::failure) throw api_error(500, "the head endpoint failed: " + ev.error);
    if (ev.kind == stream_call::event::answer) {
      a = std::move(ev.result);
      break;
    }
  }
  record_answer(ctx, a, p.req.slo_ms > 0, seconds_since(start));
  if (!a.ok) throw answer_error(a);
  auto filter = make_filter(ctx, p.req);
  filter.push(a.text);
  filter.finish();
  auto completion_tokens = ctx.tokenizer->encode(filter.text()).size();
  auto ids = make_ids(p.req.chat, ctx.facts.id);
  auto body = completion_json(ids, filter.text(), finish_reason(filter, completion_tokens, p.req),
                              usage_json(p.prompt_tokens, completion_tokens), dlm_extras(a, p.req.slo_ms));
  res.status = 200;
  res.set_content(json_text(body), "application/json");
}

// One SSE response, driven by httplib's chunked content provider on the worker thread.
struct stream_session {
  stream_session(gateway_context& c, prepared p, clock_type::time_point t0)
      : ctx(c), req(std::move(p.req)), prompt_tokens(p.prompt_tokens), start(t0),
        deadline(t0 + std::chrono::seconds(c.http.request_timeout_s)), filter(make_filter(c, req)),
        ids(make_ids(req.chat, c.facts.id)), slot(nullptr) {
    p.spec.stream = true;
    call = ctx.bridge.open_call(std::move(p.spec));
  }

  gateway_context& ctx;
  completion_request req;
  std::size_t prompt_tokens;
  clock_type::time_point start, deadline;
  output_filter filter;
  response_ids ids;
  std::unique_ptr<concurrency_slot> slot;
  std::unique_ptr<stream_call> call;  // destroyed unfinished = withdrawn
  bool first = true;
  bool first_block_seen = false;

  bool send(httplib::DataSink& sink, const json& j) {
    auto text = sse_event(json_text(j));
    return sink.write(text.data(), text.size());
  }

  // The closing events: the last chunk with its finish_reason, usage if asked, [DONE].
  bool close(httplib::DataSink& sink, const rt::answer* a) {
    auto completion_tokens = ctx.tokenizer->encode(filter.text()).size();
    auto last = chunk_json(ids, "", finish_reason(filter, completion_tokens, req), first);
    if (a) last["dilaserve"] = dlm_extras(*a, req.slo_ms);
    bool ok = send(sink, last);
    if (ok && req.include_usage) {
      json u{{"id", ids.id},
             {"object", req.chat ? "chat.completion.chunk" : "text_completion"},
             {"created", ids.created},
             {"model", ids.model},
             {"choices", json::array()},
             {"usage", usage_json(prompt_tokens, completion_tokens)}};
      ok = send(sink, u);
    }
    static const std::string done = "data: [DONE]\n\n";
    ok = ok && sink.write(done.data(), done.size());
    sink.done();
    return ok;
  }

  bool fail(httplib::DataSink& sink, const api_error& e) {
    auto text = sse_event(e.body());
    bool ok = sink.write(text.data(), text.size());
    sink.done();
    return ok;
  }

  bool emit(httplib::DataSink& sink, const std::string& text, int block) {
    auto j = chunk_json(ids, text, "", first);
    j["dilaserve"] = {{"block", block}};
    first = false;
    return send(sink, j);
  }

  // One call of the provider: wait for the next event and write it.
  bool step(httplib::DataSink& sink) {
    if (ctx.stopping) return false;
    if (clock_type::now() > deadline) {
      call->cancel();
      rt::answer timed_out;
      timed_out.error = "timed out after " + std::to_string(ctx.http.request_timeout_s) + " s";
      return fail(sink, answer_error(timed_out));
    }
    auto ev = call->next(idle_probe_interval);
    switch (ev.kind) {
      case stream_call::event::idle: {
        static const std::string probe = ": waiting\n\n";
        return sink.write(probe.data(), probe.size());
      }
      case stream_call::event::chunk: {
        if (!first_block_seen) {
          first_block_seen = true;
          ctx.metrics.observe_first_block(seconds_since(start));
        }
        auto text = filter.push(ev.block.text);
        if (!emit(sink, text, ev.block.block)) return false;
        if (filter.done()) {
          // A stop sequence or max_tokens ended the answer: the rest is not needed.
          call->cancel();
          return close(sink, nullptr);
        }
        return true;
      }
      case stream_call::event::answer: {
        record_answer(ctx, ev.result, req.slo_ms > 0, seconds_since(start));
        if (!ev.result.ok) return fail(sink, answer_error(ev.result));
        // The answer's text is the authority: blocks a re-placement skipped come here.
        std::string tail;
        const auto& seen = filter.received();
        if (ev.result.text.size() > seen.size() && ev.result.text.compare(0, seen.size(), seen) == 0)
          tail = filter.push(ev.result.text.substr(seen.size()));
        tail += filter.finish();
        if (!tail.empty() && !emit(sink, tail, -1)) return false;
        return close(sink, &ev.result);
      }
      case stream_call::event::failure:
        return fail(sink, api_error(500, "the head endpoint failed: " + ev.error));
    }
    return false;
  }
};

}  // namespace

void serve_completion(gateway_context& ctx, const httplib::Request& req, httplib::Response& res, bool chat) {
  auto start = clock_type::now();
  auto slot = std::make_unique<concurrency_slot>(ctx);
  if (!slot->granted())
    throw api_error(429,
                    "the gateway is serving its limit of " + std::to_string(ctx.http.max_concurrent) +
                        " requests (http.max_concurrent); retry later",
                    "", "rate_limit_exceeded");
  auto p = prepare(ctx, req, chat);
  if (!p.req.stream) {
    serve_whole(ctx, std::move(p), res, start);
    return;
  }
  auto session = std::make_shared<stream_session>(ctx, std::move(p), start);
  session->slot = std::move(slot);
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream", [session](std::size_t, httplib::DataSink& sink) { return session->step(sink); });
}

}  // namespace dls::gateway
