package telemetry.sink;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import javax.security.sasl.AuthenticationException;

/**
 * What every password login of {@code telemetry-sink sql-server} goes through, whichever way the
 * password is checked ({@link PasswordFileAuthenticator}, {@link LdapAuthenticator}): a bound on the
 * checks that run at once, a delay on failures, and the audit trail ({@link Audit}).
 *
 * <ol>
 *   <li><b>Concurrent checks are bounded.</b> At most {@link #CHECKS} passwords are checked at once,
 *       and at most {@link #CHECKS_PER_USER} of one user name. A login waits for its turn (up to
 *       {@link #WAIT_MS}) while at most {@link #QUEUE} others wait, and {@link #QUEUE_PER_USER} of its
 *       user; past that it is refused at once ("shed"), without a check, and counted ({@link
 *       Audit#LOGIN_SHED}). So a flood of guesses costs the server at most {@link #CHECKS} cores
 *       (PBKDF2 runs of about 0.2 s each), and a guesser who hammers one user name leaves room for
 *       the others: a right password is checked beside the flood.
 *   <li><b>A failure is answered late.</b> The answer to a failed login waits {@link
 *       #failureDelayMs} of the failures of its (address, user name) in a row: 100 ms, then twice as
 *       long each time up to {@link #MAX_DELAY_MS}. A success forgets them, and so do {@link
 *       #FORGET_MS} without one. The wait holds no check's turn, and it never refuses anything: a
 *       right password is accepted whatever others did from the same address (clients behind one
 *       Kubernetes Service or NAT share it), so nobody can lock a user out. At most {@link
 *       #MAX_REMEMBERED} (address, user) pairs are remembered, the least recently failed forgotten
 *       first.
 *   <li><b>Every failure and shed login is audited</b> with its user name and the client's address
 *       ({@link ClientAddress}).
 * </ol>
 *
 * <p>Every refusal tells the client the same thing ({@link #MESSAGE}), whatever the reason.
 */
public final class LoginGate {

  /** What a refused login is told, whatever the reason (the audit trail says which). */
  static final String MESSAGE = "wrong user name or password";

  /** The most passwords checked at once: half the cores, at least 2 and at most 4. */
  public static final int CHECKS =
      Math.max(2, Math.min(4, Runtime.getRuntime().availableProcessors() / 2));

  /** The most passwords of one user name checked at once. */
  public static final int CHECKS_PER_USER = Math.max(1, CHECKS / 2);

  /** The most logins that wait for a check's turn, and of one user name. */
  public static final int QUEUE = 8;

  public static final int QUEUE_PER_USER = 4;

  /** The longest a login waits for its turn before it is shed. */
  static final long WAIT_MS = 3_000;

  /** The delay of a first failure, doubled by each further one in a row, up to the most. */
  static final long BASE_DELAY_MS = 100;

  static final long MAX_DELAY_MS = 3_200;

  /** Failures in a row are forgotten after this long without one. */
  static final long FORGET_MS = 15 * 60_000;

  /** The most (address, user name) pairs whose failures are remembered. */
  static final int MAX_REMEMBERED = 10_000;

  /** A password check: null when the password is right, else why not (for the audit trail). */
  @FunctionalInterface
  interface Check {
    String run() throws AuthenticationException;
  }

  private static final Semaphore TURNS = new Semaphore(CHECKS, true);
  private static final AtomicInteger ADMITTED = new AtomicInteger();
  private static final Map<String, UserTurns> USERS = new ConcurrentHashMap<>();
  private static final Map<String, Failures> FAILURES =
      new LinkedHashMap<>(64, 0.75f, true) {
        private static final long serialVersionUID = 1L;

        @Override
        protected boolean removeEldestEntry(Map.Entry<String, Failures> eldest) {
          return size() > MAX_REMEMBERED;
        }
      };

  /** The turns of one user name, while any login of it is admitted (then forgotten). */
  private static final class UserTurns {
    final Semaphore turns = new Semaphore(CHECKS_PER_USER, true);
    int admitted; // guarded by USERS' compute
  }

  /** Failures in a row of one (address, user name), and when the last one was. */
  private static final class Failures {
    int count;
    long lastMillis;
  }

  private LoginGate() {}

  /**
   * Log {@code user} in with {@code check} (which {@code method} names for the audit trail): throws
   * {@link AuthenticationException} with {@link #MESSAGE} unless the check passes.
   */
  static void login(String method, String user, Check check) throws AuthenticationException {
    String address = ClientAddress.current();
    String name = user == null ? "" : user;
    String shed = admit(name);
    if (shed != null) {
      Audit.loginShed(user, address, method + ": " + shed);
      throw new AuthenticationException(MESSAGE);
    }
    String failure;
    try {
      failure = check.run();
    } catch (AuthenticationException | RuntimeException e) {
      failure = e.getMessage() == null ? e.getClass().getSimpleName() : e.getMessage();
    } finally {
      leave(name);
    }
    String key = key(address, name);
    if (failure == null) {
      synchronized (FAILURES) {
        FAILURES.remove(key);
      }
      return;
    }
    long delay = failureDelayMs(failed(key, System.currentTimeMillis()));
    Audit.loginFailed(user, address, method + ": " + failure);
    try {
      Thread.sleep(delay);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
    throw new AuthenticationException(MESSAGE);
  }

  /**
   * The delay of the answer to the {@code failures}-th failure in a row (0 for none): {@link
   * #BASE_DELAY_MS} times 2^(failures - 1), at most {@link #MAX_DELAY_MS}.
   */
  public static long failureDelayMs(int failures) {
    return Backoff.doubled(failures, BASE_DELAY_MS, MAX_DELAY_MS);
  }

  /** Count a failure of {@code key} at {@code nowMillis}; the failures in a row it makes. */
  public static int failed(String key, long nowMillis) {
    synchronized (FAILURES) {
      Failures failures = FAILURES.computeIfAbsent(key, k -> new Failures());
      if (nowMillis - failures.lastMillis > FORGET_MS) {
        failures.count = 0;
      }
      failures.count = Math.min(failures.count + 1, 1_000);
      failures.lastMillis = nowMillis;
      return failures.count;
    }
  }

  /** How many (address, user name) pairs have failures remembered now. */
  public static int remembered() {
    synchronized (FAILURES) {
      return FAILURES.size();
    }
  }

  /** Forget every failure (tests). */
  public static void forget() {
    synchronized (FAILURES) {
      FAILURES.clear();
    }
  }

  private static String key(String address, String user) {
    return (address == null ? "-" : address) + '\u0000' + name(user);
  }

  /**
   * Take a turn to check a password of {@code user}: null once taken (give it back with {@link
   * #leave}), else why the login is shed (nothing to give back).
   */
  static String admit(String user) {
    String name = name(user);
    int[] admittedOfUser = new int[1];
    UserTurns mine =
        USERS.compute(
            name,
            (k, turns) -> {
              UserTurns t = turns == null ? new UserTurns() : turns;
              admittedOfUser[0] = ++t.admitted;
              return t;
            });
    boolean admitted = false;
    boolean counted = false;
    try {
      if (admittedOfUser[0] > CHECKS_PER_USER + QUEUE_PER_USER) {
        return "too many logins of this user name at once";
      }
      counted = true;
      if (ADMITTED.incrementAndGet() > CHECKS + QUEUE) {
        return "too many logins at once";
      }
      long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(WAIT_MS);
      if (!mine.turns.tryAcquire(WAIT_MS, TimeUnit.MILLISECONDS)) {
        return "no turn to check the password within " + WAIT_MS + " ms";
      }
      long left = Math.max(0, deadline - System.nanoTime());
      if (!TURNS.tryAcquire(left, TimeUnit.NANOSECONDS)) {
        mine.turns.release();
        return "no turn to check the password within " + WAIT_MS + " ms";
      }
      admitted = true;
      return null;
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      return "interrupted while waiting for a turn";
    } finally {
      if (!admitted) {
        if (counted) {
          ADMITTED.decrementAndGet();
        }
        release(name);
      }
    }
  }

  /** Give back the turn {@link #admit} gave {@code user}. */
  static void leave(String user) {
    String name = name(user);
    TURNS.release();
    ADMITTED.decrementAndGet();
    UserTurns mine = USERS.get(name);
    if (mine != null) {
      mine.turns.release();
    }
    release(name);
  }

  private static void release(String name) {
    USERS.computeIfPresent(name, (k, turns) -> --turns.admitted == 0 ? null : turns);
  }

  /** A user name as the bookkeeping keeps it: at most 256 characters. */
  private static String name(String user) {
    return user.length() > 256 ? user.substring(0, 256) : user;
  }
}
