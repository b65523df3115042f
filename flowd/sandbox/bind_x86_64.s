# landlock-bind <ruleset fd> <program path> <argv0> [args...]
# prctl(PR_SET_NO_NEW_PRIVS, 1); landlock_restrict_self(fd, 0); close(fd); execve(path, argv+3, envp)
    .globl _start
    .text
_start:
    mov (%rsp), %r13            # argc
    cmp $4, %r13
    jl fail
    mov 16(%rsp), %rsi          # argv[1]: the fd, in decimal
    xor %edi, %edi
1:  movzbl (%rsi), %eax
    test %al, %al
    jz 2f
    sub $48, %eax
    imul $10, %edi, %edi
    add %eax, %edi
    inc %rsi
    jmp 1b
2:  mov %edi, %r12d
    mov $157, %eax              # prctl
    mov $38, %edi               # PR_SET_NO_NEW_PRIVS
    mov $1, %esi
    xor %edx, %edx
    xor %r10d, %r10d
    xor %r8d, %r8d
    syscall
    test %rax, %rax
    jnz fail
    mov $446, %eax              # landlock_restrict_self
    mov %r12d, %edi
    xor %esi, %esi
    syscall
    test %rax, %rax
    jnz fail
    mov $3, %eax                # close
    mov %r12d, %edi
    syscall
    mov 24(%rsp), %rdi          # argv[2]: the program's path
    lea 32(%rsp), %rsi          # argv[3...]: its argv
    lea 16(%rsp,%r13,8), %rdx   # envp
    mov $59, %eax               # execve
    syscall
    mov $127, %edi              # not found / not executable
    jmp out
fail:
    mov $2, %edi                # stderr
    lea msg(%rip), %rsi
    mov $msglen, %edx
    mov $1, %eax                # write
    syscall
    mov $126, %edi
out:
    mov $60, %eax               # exit
    syscall
msg: .ascii "flowd: landlock_restrict_self failed\n"
    .set msglen, . - msg
