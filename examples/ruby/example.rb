# cobro from a Ruby app: what a merchant's engineer would copy.
#
# 1. In ONE transaction of the app's own: insert an order and enqueue its
#    charge with cobro.enqueue_charge(...); a rollback leaves no attempt.
# 2. Over HTTP: POST /charges with an API key; the same Idempotency-Key
#    twice gives the same attempt.
# 3. Read the attempt's state (GET /attempts/{id}) until a worker settles it.
# 4. Receive the customer notice cobro POSTs to the app and verify its
#    signature.
#
# Dependencies: Ruby's standard library and the pg gem (Debian: apt-get
# install ruby ruby-pg; or `bundle install` with the Gemfile here).
# Standard Webhooks publishes a Ruby library (the `standardwebhooks` gem),
# but it could not be installed where this example is tested (no RubyGems
# registry there), so NoticeVerifier below checks the signature exactly as
# the Standard Webhooks spec says (HMAC-SHA256 over "id.timestamp.body" with
# the base64 secret after "whsec_", constant-time compare, 5 minutes of
# tolerance). With the gem, `StandardWebhooks::Webhook.new(secret).verify(
# body, headers)` replaces it.
#
# Settings (environment): DATABASE_URL (cobro's PostgreSQL), COBRO_URL
# (cobro serve), COBRO_API_KEY (a key with charges:write and attempts:read),
# COBRO_NOTICE_SECRET (the workers' whsec_ secret), NOTICE_PORT (where this
# app listens for notices: the workers' COBRO_NOTICE_URL). examples/run
# starts everything and runs this; its simulator declines every charge
# (insufficient_funds), so each charge settles RECHAZADO and cobro sends
# the notice payment.retry_scheduled. Exits non-zero on any failed check.

require "base64"
require "json"
require "net/http"
require "openssl"
require "securerandom"
require "socket"
require "pg"

def env(name)
  ENV.fetch(name) { fail_check("#{name} is not set") }
end

def fail_check(what)
  warn "ruby example: FAILED: #{what}"
  exit 1
end

def check(ok, what)
  fail_check(what) unless ok
  puts "  ok: #{what}"
end

DATABASE_URL = env("DATABASE_URL")
COBRO_URL = env("COBRO_URL").chomp("/")
API_KEY = env("COBRO_API_KEY")
NOTICE_SECRET = env("COBRO_NOTICE_SECRET")
NOTICE_PORT = Integer(env("NOTICE_PORT"))
RUN = SecureRandom.hex(4) # order ids unique to this run

# --- 1. the order and its charge commit together, or not at all ---------

# The app's own transaction: its order row and cobro's attempt.
def place_order(conn, order_id, amount_minor, currency)
  conn.transaction do
    conn.exec_params("INSERT INTO orders (id, amount_minor, currency) VALUES ($1, $2, $3)",
                     [order_id, amount_minor, currency])
    # The key is generated when the intent is made; keep it with the order.
    row = conn.exec_params(
      "SELECT attempt_id, idempotency_key, state, created FROM cobro.enqueue_charge($1, $2, $3, $4)",
      [order_id, amount_minor, currency, SecureRandom.uuid]
    )[0]
    conn.exec_params("UPDATE orders SET attempt_id = $1 WHERE id = $2", [row["attempt_id"], order_id])
    row
  end
end

def in_one_transaction
  puts "1. enqueue inside the app's own transaction (pg)"
  conn = PG.connect(DATABASE_URL)
  conn.exec("CREATE TABLE IF NOT EXISTS orders (id text PRIMARY KEY, amount_minor bigint NOT NULL," \
            " currency text NOT NULL, attempt_id uuid)")
  order = "rb-sql-#{RUN}"
  a = place_order(conn, order, 1999, "USD")
  check(a["created"] == "t" && a["state"] == "PENDIENTE",
        "order #{order} and attempt #{a['attempt_id']} committed (#{a['state']})")

  # The same, but the app's transaction fails after the enqueue.
  doomed = "rb-rollback-#{RUN}"
  begin
    conn.transaction do
      conn.exec_params("INSERT INTO orders (id, amount_minor, currency) VALUES ($1, 500, 'USD')", [doomed])
      conn.exec_params("SELECT * FROM cobro.enqueue_charge($1, 500, 'USD')", [doomed])
      raise "the app fails before COMMIT"
    end
  rescue RuntimeError
    nil
  end
  left = conn.exec_params("SELECT count(*) FROM cobro.payment_attempts WHERE order_id = $1", [doomed])[0]["count"]
  check(left == "0", "a rolled-back transaction leaves no attempt")

  # Bad input is refused by the database, naming the field (SQLSTATE 22023).
  begin
    conn.exec_params("SELECT * FROM cobro.enqueue_charge($1, -5, 'USD')", ["rb-bad-#{RUN}"])
    fail_check("a negative amount is refused")
  rescue PG::InvalidParameterValue => e
    msg = e.result.error_field(PG::Result::PG_DIAG_MESSAGE_PRIMARY)
    check(msg.start_with?("invalid amount_minor"), "a negative amount is refused: #{msg}")
  end
ensure
  conn&.close
end

# --- 2. over HTTP with an API key ----------------------------------------

def api(method, path, body = nil, idempotency_key = nil)
  uri = URI(COBRO_URL + path)
  req = method == :post ? Net::HTTP::Post.new(uri) : Net::HTTP::Get.new(uri)
  req["Authorization"] = "Bearer #{API_KEY}"
  if body
    req["Content-Type"] = "application/json"
    req.body = JSON.generate(body)
  end
  req["Idempotency-Key"] = idempotency_key if idempotency_key
  resp = Net::HTTP.start(uri.host, uri.port, open_timeout: 5, read_timeout: 10) { |h| h.request(req) }
  [resp.code.to_i, resp, JSON.parse(resp.body)]
end

def over_http
  puts "2. enqueue over HTTP (POST /charges, Bearer key)"
  key = SecureRandom.uuid
  charge = { order_id: "rb-http-#{RUN}", amount_minor: 2500, currency: "EUR" }
  status, _, first = api(:post, "/charges", charge, key)
  check(status == 201, "POST /charges answered #{status}: attempt #{first['attempt_id']}")
  status, resp, again = api(:post, "/charges", charge, key)
  check(status == 201 && again["attempt_id"] == first["attempt_id"] && resp["Idempotent-Replayed"] == "true",
        "the same Idempotency-Key again returns the same attempt (Idempotent-Replayed: true)")
  first["attempt_id"]
end

# --- 3. read the attempt's state -----------------------------------------

SETTLED = %w[APROBADO RECHAZADO EN_REVISION].freeze

def wait_settled(attempt_id)
  puts "3. read the attempt's state (GET /attempts/#{attempt_id})"
  deadline = Time.now + 30
  loop do
    status, _, body = api(:get, "/attempts/#{attempt_id}")
    fail_check("GET /attempts/{id} answered #{status}: #{body}") unless status == 200
    attempt = body["attempt"]
    if SETTLED.include?(attempt["state"])
      history = body["transitions"].map { |t| t["to_state"] }.join(" -> ")
      check(true, "settled: #{attempt['state']} (history: #{history})")
      return attempt
    end
    fail_check("not settled within 30 s (still #{attempt['state']})") if Time.now > deadline
    sleep 0.5
  end
end

# --- 4. the customer notice, verified ------------------------------------

# Standard Webhooks verification, by the spec (see the header comment).
class NoticeVerifier
  TOLERANCE = 5 * 60

  def initialize(secret)
    @key = Base64.strict_decode64(secret.delete_prefix("whsec_"))
  end

  # The parsed payload, or nil when the notice is not cobro's.
  def verify(body, headers)
    id, ts, sigs = headers.values_at("webhook-id", "webhook-timestamp", "webhook-signature")
    return nil unless id && ts && sigs && ts.match?(/\A\d+\z/)
    return nil if (Time.now.to_i - ts.to_i).abs > TOLERANCE
    expected = "v1," + Base64.strict_encode64(OpenSSL::HMAC.digest("SHA256", @key, "#{id}.#{ts}.#{body}"))
    return nil unless sigs.split(" ").any? { |s| s.bytesize == expected.bytesize && OpenSSL.secure_compare(s, expected) }
    JSON.parse(body)
  end
end

VERIFIER = NoticeVerifier.new(NOTICE_SECRET)
NOTICES = Queue.new

# A tiny HTTP receiver (Ruby's standard library has no server since 3.0).
def receive(sock)
  request_line = sock.gets("\r\n", 8192) or return
  headers = {}
  while (line = sock.gets("\r\n", 8192)) && line != "\r\n"
    name, value = line.split(":", 2)
    headers[name.strip.downcase] = value.to_s.strip
  end
  length = headers["content-length"].to_i
  body = length.positive? && length <= 1_000_000 ? sock.read(length).to_s.force_encoding("UTF-8") : ""
  payload = request_line.start_with?("POST ") ? VERIFIER.verify(body, headers) : nil
  if payload
    # Deduplicate by webhook-id in a real app: a notice may come twice.
    NOTICES << [headers, body, payload]
    sock.write("HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n") # 2xx = delivered
  else
    sock.write("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n") # never act on it
  end
rescue StandardError
  nil
ensure
  sock.close
end

def notice_for(attempt_id)
  puts "4. the customer notice for attempt #{attempt_id}, verified by the Standard Webhooks spec"
  deadline = Time.now + 60
  loop do
    left = deadline - Time.now
    fail_check("no verified notice for the attempt within 60 s") if left <= 0
    begin
      headers, body, payload = NOTICES.pop(true) # (Ruby 3.1's Queue#pop has no timeout)
    rescue ThreadError
      sleep 0.2
      next
    end
    next unless payload && payload["data"]["attempt_id"] == attempt_id

    check(true, "#{headers['webhook-id']}: #{payload['type']}: #{payload['data']['what_happened']}")
    forged = body.sub('"amount_minor":2500', '"amount_minor":1')
    check(forged != body && VERIFIER.verify(forged, headers).nil?, "a changed body fails verification")
    return payload
  end
end

server = TCPServer.new("127.0.0.1", NOTICE_PORT)
acceptor = Thread.new { loop { Thread.new(server.accept) { |s| receive(s) } } }
in_one_transaction
attempt_id = over_http
attempt = wait_settled(attempt_id)
# examples/run's simulator declines every charge, so a notice must follow.
check(attempt["state"] == "RECHAZADO", "declined by examples/run's simulator, as set up")
notice_for(attempt_id)
acceptor.kill
acceptor.join
server.close
puts "ruby example: all checks passed"
