package io.github.lakehouse.thrift;

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.util.Map;
import javax.security.sasl.AuthenticationException;
import org.apache.hive.service.auth.PasswdAuthenticationProvider;

/**
 * The Spark Thrift Server's login check for dbt's `cluster` target: HiveServer2's CUSTOM
 * authentication (`hive.server2.authentication=CUSTOM`, this class as
 * `hive.server2.custom.authentication.class`), set by `lakehouse cluster thrift-server` when
 * LAKEHOUSE_THRIFT_PASSWORD is in its environment.
 *
 * <p>A client logs in (SASL PLAIN) as LAKEHOUSE_THRIFT_USER (default {@code lakehouse}) with the
 * password LAKEHOUSE_THRIFT_PASSWORD. Both are read from the server's environment, never from its
 * command line (which `ps` shows every user) nor from a file. HiveServer2 makes one instance per
 * login; user name and password are compared in constant time, and a refusal says no more than
 * that the pair is wrong.
 */
public final class EnvironmentPasswordAuthenticator implements PasswdAuthenticationProvider {
    public static final String USER_VARIABLE = "LAKEHOUSE_THRIFT_USER";
    public static final String PASSWORD_VARIABLE = "LAKEHOUSE_THRIFT_PASSWORD";
    public static final String DEFAULT_USER = "lakehouse";

    private final byte[] user;
    private final byte[] password;

    /** What HiveServer2 calls (through Hadoop's ReflectionUtils): the process's environment. */
    public EnvironmentPasswordAuthenticator() {
        this(System.getenv());
    }

    EnvironmentPasswordAuthenticator(Map<String, String> environment) {
        String expected = environment.get(PASSWORD_VARIABLE);
        if (expected == null || expected.isEmpty()) {
            // Never accept every password because the variable went missing.
            throw new IllegalStateException(PASSWORD_VARIABLE + " is not set in the Thrift Server's environment");
        }
        String name = environment.get(USER_VARIABLE);
        this.user = bytes(name == null || name.isEmpty() ? DEFAULT_USER : name);
        this.password = bytes(expected);
    }

    @Override
    public void Authenticate(String user, String password) throws AuthenticationException {
        // Both compared, whatever the first gives: the time taken says nothing about which was wrong.
        boolean userMatches = MessageDigest.isEqual(bytes(user), this.user);
        boolean passwordMatches = MessageDigest.isEqual(bytes(password), this.password);
        if (!(userMatches & passwordMatches)) {
            throw new AuthenticationException("wrong user name or password");
        }
    }

    private static byte[] bytes(String text) {
        return (text == null ? "" : text).getBytes(StandardCharsets.UTF_8);
    }
}
